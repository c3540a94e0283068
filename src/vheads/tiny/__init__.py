"""The built-in tiny VLM: a trained Qwen3-VL small enough for a laptop CPU."""


def __getattr__(name: str):
    """Lazy access to the training and evaluation API (keeps ``import vheads`` light).

    ``tiny_model_path`` lives in :mod:`vheads.models` (the model registry knows where the
    built-in weights are); it is re-exported here for convenience.
    """
    if name == "tiny_model_path":
        from vheads.models import tiny_model_path

        return tiny_model_path
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
