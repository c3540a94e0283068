"""Overlap between settings and noise ceilings: the seed's Figure 2, Table 20, Figures 6
and 7, Table 21."""

from __future__ import annotations

from vheads.report import _figures as F
from vheads.report import _overlaps as O
from vheads.report import _tables as T
from vheads.report._data import RunData
from vheads.report._registry import figure, section

HOW = (
    "Cell (i, j) counts the heads the top-k sets of two settings share; the diagonal shows each setting's "
    "split-half noise ceiling (the overlap two halves of its own items reach). Read an overlap against the "
    "ceilings: the fraction = overlap / sqrt(ceiling_A · ceiling_B) is near 1 when two settings find the same "
    "heads up to sampling noise, and well below 1 when the choice that differs (corpus, query type, attention "
    "source) changes which heads are found."
)


@section("overlap", "Overlap between settings and noise ceilings", HOW, order=40,
         needs=("discovery", "overlap", "ceilings", "random_overlap"),
         tables=("Top-k overlap *", "Split-half *", "Overlap with a uniform*", "Crossover *"),
         figures=("overlap", "overlap_curves", "random_overlap"))
def overlap(run: RunData) -> list:
    blocks: list = []
    om = T.overlap_matrix(run)
    if om:
        labels, matrix, k = om
        blocks.append(figure("overlap", F.overlap_figure(run, labels, matrix, k),
                             "Figure 2 layout: top-k overlap between all settings (diagonal: split-half noise ceiling where "
                             "stored).", max_width=900))
    blocks += [T.overlap_table(run), T.ceilings_table(run)]
    blocks.append(figure("overlap_curves", O.overlap_curve_figure(run), "Figure 6 layout: shared heads / k between settings "
                         "that differ only in corpus, over k (dotted: the study's k).", wide=False))
    # one panel per corpus: two fit a grid column, more take the page's width
    blocks.append(figure("random_overlap", O.random_overlap_figure(run), "Figure 7 layout: top-k overlap of the native "
                         "head-sets with each other (blue) and with uniform random draws of k heads (grey: mean, bar: "
                         "min–max over draws).", wide=len(O.native_overlap_bars(run)) > 2))
    return blocks + [O.random_overlap_table(run), O.crossover_table(run)]
