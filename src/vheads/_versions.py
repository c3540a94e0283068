"""The versions vheads needs, checked once at the start of a command that loads a model:
one clear line naming the package, the version found and the requirement, instead of an
AttributeError deep inside an adapter."""

from __future__ import annotations

from importlib import metadata

from vheads._errors import VheadsError

#: the packages whose version the adapters and the engine depend on (pyproject.toml's ranges)
CHECKED = ("torch", "transformers")


def requirements() -> dict[str, str]:
    """``{package: specifier}`` of :data:`CHECKED` as the installed vheads declares them."""
    from packaging.requirements import Requirement

    try:
        declared = metadata.requires("vheads") or []
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return {}
    out = {}
    for line in declared:
        r = Requirement(line)
        if r.name in CHECKED and r.marker is None:
            out[r.name] = str(r.specifier)
    return out


def check_versions(installed: dict[str, str] | None = None, required: dict[str, str] | None = None) -> None:
    """Refuse, with one line, an installed torch or transformers outside vheads' declared
    range (``installed`` / ``required``: the versions to judge, default this environment's).
    A CUDA build is judged by its version alone (``2.13.0+cu128`` is 2.13.0)."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    required = requirements() if required is None else required
    for name, spec in required.items():
        have = (installed or {}).get(name) if installed is not None else _installed(name)
        if have is None:
            raise VheadsError(f"{name} is not installed; vheads needs {name}{spec} (run `make setup`, see the README)")
        if not SpecifierSet(spec).contains(Version(Version(have).base_version)):
            raise VheadsError(f"{name} {have} is installed, but vheads needs {name}{spec}: "
                              f"pip install '{name}{spec}' (a GPU torch: see the README's GPU set-up)")


def _installed(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def main() -> int:
    """``python -m vheads._versions``: one line, the versions found and whether they fit (exit 2 if not)."""
    import sys

    try:
        check_versions()
    except VheadsError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    found = ", ".join(f"{n} {_installed(n)}" for n in CHECKED)
    print(f"versions: {found} (vheads needs {', '.join(f'{n}{s}' for n, s in requirements().items()) or 'nothing declared'})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
