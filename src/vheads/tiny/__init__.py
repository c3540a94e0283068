"""The built-in tiny VLM: a trained Qwen3-VL small enough for a laptop CPU."""

from pathlib import Path


def tiny_model_path() -> Path:
    """Folder of the shipped tiny model's files (loaded like any local checkpoint)."""
    path = Path(__file__).parent / "weights"
    if not (path / "config.json").exists():
        raise FileNotFoundError(
            f"the built-in tiny model's files are missing from {path}; rebuild them with "
            "`vheads tiny train --out <dir>` and copy the folder there"
        )
    return path
