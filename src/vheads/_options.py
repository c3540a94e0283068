"""The command-line options every command that loads a model shares, defined once.

``discover``, ``evaluate``, ``audit``, ``doctor`` and ``causal-map`` take the same loading
flags with the same help and defaults; each is an ``Annotated`` type a command's parameter
uses (``device: options.Device = "cpu"``). Typer and the standard library only: ``--help``
loads no torch (``tests/test_cli_startup.py``).
"""

from __future__ import annotations

from typing import Annotated, Optional

import typer

Model = Annotated[str, typer.Option(help="'tiny', a local model folder (see docs/data_formats.md: the files it needs) or a hub id")]
Revision = Annotated[Optional[str], typer.Option(help="hub revision (branch, tag or commit) of a hub id; recorded in the head-set files")]  # noqa: UP007
Device = Annotated[str, typer.Option(help="torch device: cpu, cuda, cuda:N, mps")]
Dtype = Annotated[str, typer.Option(help="auto (bfloat16 on CUDA, float32 on CPU), float32, bfloat16 or float16")]
DeviceMap = Annotated[Optional[str], typer.Option("--device-map", help="place the layers instead of --device: auto, balanced, balanced_low_0, sequential (accelerate) or one device")]  # noqa: UP007
Quantize = Annotated[Optional[str], typer.Option("--quantize", help="4bit or 8bit weights through bitsandbytes (CUDA only)")]  # noqa: UP007
TrustRemoteCode = Annotated[bool, typer.Option("--trust-remote-code", help="let the checkpoint run its own Python code")]


def check_load_flags(device: str = "cpu", device_map: str | None = None, quantize: str | None = None) -> None:
    """The loading flags checked before any work, each refusal naming its flag
    (``--device cuda`` on a machine without CUDA names ``--device``, not ``--device-map``)."""
    from vheads._errors import VheadsError
    from vheads.models import check_device, check_load_options

    for flag, check, args in (("--device", check_device, (device,)),
                              ("--device-map", check_load_options, (device, device_map, None)),
                              ("--quantize", check_load_options, (device, device_map, quantize))):
        try:
            check(*args)
        except VheadsError as e:
            raise VheadsError(f"{flag}: {e}") from None
