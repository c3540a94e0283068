"""A discovery setting (corpus × query type × attention source) and the names it is built
from; torch-free, so a config or flag naming an unknown source is refused before torch loads."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

SOURCES: tuple[str, ...] = ("last", "qspan", "out")
QUERIES: tuple[str, ...] = ("ordinal", "referring")
#: corpus name -> two-letter id part. Built-in synthetic corpora: ``comics`` (cm), ``photo``
#: (ph); real: ``coco`` (co). A strip folder names its own abbreviation in its JSON.
CORPUS_ABBREV: dict[str, str] = {"comics": "cm", "photo": "ph", "coco": "co"}
QUERY_ABBREV: dict[str, str] = {"ordinal": "ord", "referring": "ref"}
SOURCE_ABBREV: dict[str, str] = {"last": "last", "qspan": "qsp", "out": "out"}
#: which layout span holds each source's rows
SOURCE_SPAN: dict[str, str] = {"last": "last", "qspan": "query", "out": "answer"}


@dataclass(frozen=True)
class Setting:
    """One discovery setting = corpus × query type × attention source."""

    corpus: str
    query: str
    source: str
    corpus_abbrev: str | None = None  # defaults to CORPUS_ABBREV[corpus] or its first two letters

    def __post_init__(self) -> None:
        if self.query not in QUERIES:
            raise ValueError(f"unknown query type {self.query!r}; choose one of: {', '.join(QUERIES)}")
        if self.source not in SOURCES:
            raise ValueError(f"unknown attention source {self.source!r}; choose one of: {', '.join(SOURCES)}")
        if not self.corpus:
            raise ValueError("a setting needs a corpus name")
        if not self.corpus_abbrev:
            object.__setattr__(self, "corpus_abbrev", CORPUS_ABBREV.get(self.corpus, self.corpus[:2].lower()))

    @property
    def abbrev(self) -> str:
        return self.corpus_abbrev

    @property
    def id(self) -> str:
        """``cm-ref-qsp``-style id."""
        return f"{self.abbrev}-{QUERY_ABBREV[self.query]}-{SOURCE_ABBREV[self.source]}"

    def to_dict(self) -> dict[str, str]:
        return {"id": self.id, "corpus": self.corpus, "corpus_abbrev": self.abbrev, "query": self.query, "source": self.source}

    @classmethod
    def from_dict(cls, d: Mapping[str, str]) -> "Setting":
        return cls(d["corpus"], d["query"], d["source"], d.get("corpus_abbrev"))
