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


def __getattr__(name: str):
    """Lazy access to the training and evaluation API (keeps ``import vheads`` light)."""
    if name in ("train", "train_shipped", "build_untrained"):
        from vheads.tiny import _train

        return getattr(_train, name)
    if name in ("evaluate", "predict"):
        from vheads.tiny import _evaluate

        return getattr(_evaluate, name)
    if name == "region_head_scores":
        from vheads.tiny import _heads

        return _heads.region_head_scores
    if name == "app":
        from vheads.tiny._cli import app

        return app
    raise AttributeError(f"module 'vheads.tiny' has no attribute {name!r}")


__all__ = ["app", "build_untrained", "evaluate", "predict", "region_head_scores", "tiny_model_path", "train", "train_shipped"]
