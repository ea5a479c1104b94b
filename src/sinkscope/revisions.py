"""Pin a config's hub revisions to commit shas: the model-side twin of the lock file.

``revision: main`` names whatever the hub holds on the day a job runs, so two reviewers a month
apart can extract from different weights. ``sinkscope pin-revisions CONFIG`` asks the hub
(``HfApi.model_info`` / ``dataset_info``, which honour ``HF_ENDPOINT`` and the login token) for the
commit each ``models.<name>.source.revision`` and ``datasets.<name>.source.revision`` of a hub
source points at now, and writes the 40-hex sha back into the file in place of the branch or tag.
Only those scalars change: comments, order and flow style stay as they were (the YAML is edited
at the character offsets of the parsed scalars, not re-dumped). ``--check`` needs no hub: it lists
the revisions that are not pinned yet and exits 1 if there are any.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import yaml

from sinkscope.config import read_config_file
from sinkscope.io import atomic_path

#: a git commit id as the hub reports it
COMMIT_SHA = re.compile(r"[0-9a-f]{40}")

#: the config sections with hub sources, the hub's repo type, and the source key holding the repo id
HUB_SECTIONS: dict[str, tuple[Literal["model", "dataset"], str]] = {
    "models": ("model", "id"),
    "datasets": ("dataset", "path"),
}


class PinError(RuntimeError):
    """A revision that cannot be read or resolved; the message names the config key."""


@dataclass(frozen=True)
class HubRevision:
    """One hub source's ``revision`` scalar in a config file."""

    key: str  #: dotted config key, e.g. ``models.gpt2.source.revision``
    repo_type: Literal["model", "dataset"]
    repo_id: str
    revision: str
    start: int  #: character offsets of the scalar (with its quotes) in the file's text
    end: int

    @property
    def pinned(self) -> bool:
        return COMMIT_SHA.fullmatch(self.revision) is not None


def _mapping_items(node: yaml.Node) -> Iterator[tuple[str, yaml.Node]]:
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode):
                yield key.value, value


def find_hub_revisions(text: str, filename: str = "<config>") -> list[HubRevision]:
    """Every hub source's revision in a config file's text, with where it is written."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as error:
        raise PinError(f"{filename}: not valid YAML: {error}") from error
    found = []
    for section, (repo_type, id_key) in HUB_SECTIONS.items():
        entries = dict(_mapping_items(root)).get(section) if root is not None else None
        for name, entry in _mapping_items(entries) if entries is not None else ():
            source = dict(_mapping_items(entry)).get("source")
            fields = dict(_mapping_items(source)) if source is not None else {}
            kind, revision = fields.get("kind"), fields.get("revision")
            if not (isinstance(kind, yaml.ScalarNode) and kind.value == "hub"):
                continue
            key = f"{section}.{name}.source.revision"
            repo = fields.get(id_key)
            if not isinstance(revision, yaml.ScalarNode) or not isinstance(repo, yaml.ScalarNode):
                raise PinError(
                    f"{filename}: {section}.{name}.source needs `{id_key}` and `revision`"
                )
            found.append(
                HubRevision(
                    key=key,
                    repo_type=repo_type,
                    repo_id=repo.value,
                    revision=revision.value,
                    start=revision.start_mark.index,
                    end=revision.end_mark.index,
                )
            )
    return found


Resolver = Callable[[HubRevision], str]


def hub_resolver(timeout: float = 10.0) -> Resolver:
    """Resolve a revision with the hub's API (``HF_ENDPOINT``, the login token, no retries)."""
    from huggingface_hub import HfApi

    api = HfApi()

    def resolve(entry: HubRevision) -> str:
        info = api.model_info if entry.repo_type == "model" else api.dataset_info
        try:
            sha = info(entry.repo_id, revision=entry.revision, timeout=timeout).sha
        except Exception as error:  # network, 401/404 and offline mode all end up here
            raise PinError(
                f"{entry.key}: could not resolve {entry.repo_type} {entry.repo_id!r} at revision "
                f"{entry.revision!r} on {api.endpoint} ({type(error).__name__}: "
                f"{str(error).splitlines()[0] if str(error) else 'no detail'}); pin-revisions "
                "needs hub access (and `huggingface-cli login` for gated repos)"
            ) from error
        if not sha or COMMIT_SHA.fullmatch(sha) is None:
            raise PinError(f"{entry.key}: the hub answered {sha!r}, not a commit sha")
        return sha

    return resolve


def pin_text(text: str, resolved: Sequence[tuple[HubRevision, str]]) -> str:
    """``text`` with each revision scalar replaced by its quoted commit sha."""
    for entry, sha in sorted(resolved, key=lambda pair: pair[0].start, reverse=True):
        text = text[: entry.start] + f'"{sha}"' + text[entry.end :]
    return text


def pin_revisions(
    path: str | Path, resolve: Resolver | None = None
) -> list[tuple[HubRevision, str]]:
    """Resolve every unpinned hub revision of the config file at ``path`` and write the shas back.

    Nothing is written unless every revision resolves. Returns what was pinned (revision, sha).
    """
    path = Path(path)
    read_config_file(path)  # a YAML error, a duplicate key: file, line and column named
    text = path.read_text()
    todo = [entry for entry in find_hub_revisions(text, str(path)) if not entry.pinned]
    resolve = resolve or hub_resolver()
    resolved = [(entry, resolve(entry)) for entry in todo]
    if resolved:
        new_text = pin_text(text, resolved)
        check = {e.key: e.revision for e in find_hub_revisions(new_text, str(path))}
        assert all(check[entry.key] == sha for entry, sha in resolved), "pinned text re-reads wrong"
        with atomic_path(path) as tmp:
            tmp.write_text(new_text)
    return resolved


def unpinned(path: str | Path) -> list[HubRevision]:
    """The hub revisions of a config file that are not commit shas (no hub needed)."""
    path = Path(path)
    read_config_file(path)
    return [e for e in find_hub_revisions(path.read_text(), str(path)) if not e.pinned]
