"""A score point as a discovery setting: its name (a preset's, or a custom point's own) and
:class:`ScoreSetting`, the setting of a head-set discovered with it, read back from a
head-set file by :func:`setting_from_dict` (:mod:`vheads.discovery._point_discovery` scores them)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from vheads._errors import VheadsError
from vheads.discovery._score_space import AXES, SCORE_REGISTRY, ScorePoint, parse_score
from vheads.discovery._source_setting import CORPUS_ABBREV, QUERIES, QUERY_ABBREV, SOURCE_ABBREV, Setting

SCORE_NAME = re.compile(r"[a-z0-9][a-z0-9_.+]{0,31}")


def point_name(point: ScorePoint) -> str:
    """The automatic name of a custom point: its values that differ from :class:`ScorePoint`'s
    defaults, in axis order, ``-`` dropped (``hit-frequency`` → ``hitfrequency``), and ``k<k>``."""
    base = ScorePoint()
    parts = [getattr(point, a).replace("-", "") for a in AXES if getattr(point, a) != getattr(base, a)]
    return "_".join(parts + ([f"k{point.k}"] if point.k is not None else []))


def check_score_name(name: str, where: str) -> str:
    """``name`` may be the last part of a setting id (else :class:`VheadsError` naming ``where``)."""
    if not isinstance(name, str) or not SCORE_NAME.fullmatch(name):
        raise VheadsError(f"{where}: score name {name!r} must be lower-case letters, digits, '_', '.' or '+' "
                          "(no '-': it separates the parts of a setting id), at most 32 characters")
    if name in SOURCE_ABBREV.values():
        raise VheadsError(f"{where}: score name {name!r} is the seed's {name!r} source part of a setting id; "
                          "name the point, e.g. 'mine:rows=...'")
    return name


def parse_named_score(text: str, where: str = "--score") -> tuple[str, ScorePoint]:
    """``(name, point)`` of a preset name, ``NAME:axis=value,...`` or ``axis=value,...``."""
    if not isinstance(text, str):
        raise VheadsError(f"{where}: expected a preset name or a point like 'rows=out,keys=hit', got {text!r:.80}")
    text = text.strip()
    name, sep, rest = text.partition(":")
    try:
        if sep:
            return check_score_name(name.strip(), where), parse_score(rest)
        point = parse_score(text)
    except VheadsError as e:
        raise VheadsError(f"{where}: {e}") from None
    return check_score_name(text if text in SCORE_REGISTRY else point_name(point), where), point


@dataclass(frozen=True)
class ScoreSetting:
    """A score point on one corpus and query type: the setting of a head-set discovered with it.

    The same interface as :class:`vheads.discovery.Setting` (``source`` is ``"score"``)."""

    corpus: str
    query: str
    name: str
    point: ScorePoint
    corpus_abbrev: str | None = None

    def __post_init__(self) -> None:
        if self.query not in QUERIES:
            raise ValueError(f"unknown query type {self.query!r}; choose one of: {', '.join(QUERIES)}")
        check_score_name(self.name, "setting")
        if not self.corpus_abbrev:
            object.__setattr__(self, "corpus_abbrev", CORPUS_ABBREV.get(self.corpus, self.corpus[:2].lower()))

    source = "score"

    @property
    def abbrev(self) -> str:
        return self.corpus_abbrev

    @property
    def id(self) -> str:
        return f"{self.abbrev}-{QUERY_ABBREV[self.query]}-{self.name}"

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "corpus": self.corpus, "corpus_abbrev": self.abbrev, "query": self.query, "source": "score",
                "score": {"name": self.name, **self.point.to_dict()}}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "ScoreSetting":
        sc = dict(d["score"])
        name = sc.pop("name")
        try:
            point = ScorePoint(**sc)
        except (VheadsError, TypeError) as e:
            raise ValueError(f"setting.score: {e}") from None
        return cls(d["corpus"], d["query"], name, point, d.get("corpus_abbrev"))


def setting_from_dict(d: Mapping[str, Any]):
    """A head-set file's ``setting``: a :class:`ScoreSetting` where it records a score point,
    else the seed's :class:`~vheads.discovery.Setting`."""
    return ScoreSetting.from_dict(d) if d.get("source") == "score" else Setting.from_dict(d)
