"""A hand flood fill the grounding and score tests read their components from (independent of
``scipy.ndimage.label``, which the code uses)."""


def components(keep: set[tuple[int, int]]) -> list[list[tuple[int, int]]]:
    """The 8-connected components of the grid cells ``keep``, each seeded at its first cell in
    row-major order (so ties between equal sizes go to the first)."""
    comps, seen = [], set()
    for c in sorted(keep):
        if c in seen:
            continue
        comp, todo = [], [c]
        seen.add(c)
        while todo:
            r0, c0 = todo.pop()
            comp.append((r0, c0))
            for dr in (-1, 0, 1):
                for dc in (-1, 0, 1):
                    nb = (r0 + dr, c0 + dc)
                    if nb in keep and nb not in seen:
                        seen.add(nb)
                        todo.append(nb)
        comps.append(comp)
    return comps
