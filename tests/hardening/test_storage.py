"""Damaged store, full disk, read-only disk: one clear line, nothing half-written (point 5).

The full and read-only disks are real: a 300 KiB tmpfs and a read-only bind mount, made
in a private mount namespace (``unshare -m``); skipped where that is not permitted.
"""

import shutil
import subprocess
import sys
import textwrap

import pytest
from PIL import Image

from tests.hardening.clitools import NO_MODEL, SRC, refused, vheads
from tests.report.synth import make_run


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    return make_run(tmp_path_factory.mktemp("run") / "run")


@pytest.fixture()
def run(run_dir, tmp_path):
    """A fresh copy of a synthetic run (no model) per test."""
    return shutil.copytree(run_dir, tmp_path / "run")


def _mount_namespace_ok() -> bool:
    if shutil.which("unshare") is None:
        return False
    r = subprocess.run(["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt"], capture_output=True)
    return r.returncode == 0


needs_mounts = pytest.mark.skipif(not _mount_namespace_ok(), reason="needs unshare -m and mount (a privileged container)")


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
@pytest.mark.parametrize("command", ["report", "export"])
def test_a_damaged_store_is_one_line_and_left_untouched(run, damage, command):
    store = run / "results.sqlite"
    data = store.read_bytes()
    store.write_bytes(b"this is not SQLite " * 64 if damage == "garbage" else data[:1000])
    before = store.read_bytes()
    line = refused(vheads(command, run), "results.sqlite")
    assert "damaged" in line or "not a database" in line or "malformed" in line
    assert store.read_bytes() == before


def _png_ok(p) -> bool:
    with Image.open(p) as im:
        im.load()
    return True


@needs_mounts
def test_full_disk_during_the_report_is_one_line_and_leaves_no_partial_figure(run, tmp_path):
    out = tmp_path / "full"
    out.mkdir()
    script = textwrap.dedent(f"""
        mount -t tmpfs -o size=300k tmpfs {out} || exit 99
        PYTHONPATH={SRC} OMP_NUM_THREADS=1 {sys.executable} -m vheads.cli report {run} --out {out}
        echo "rc=$?"
        mkdir -p {tmp_path}/seen && cp -r {out}/. {tmp_path}/seen/
    """)
    r = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, timeout=300)
    assert "rc=2" in r.stdout, r.stdout + r.stderr
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: the disk is full") and "Traceback" not in r.stderr, r.stderr
    seen = list((tmp_path / "seen").rglob("*"))
    files = [p for p in seen if p.is_file()]
    assert files, "the disk filled before any figure: the test no longer exercises a mid-report failure"
    assert not [p for p in files if p.stat().st_size == 0 or p.name.endswith(".tmp")]
    assert all(_png_ok(p) for p in files if p.suffix == ".png")
    assert not (tmp_path / "seen" / "report.html").exists()  # the report stops at the failure


@needs_mounts
def test_report_and_export_work_on_a_read_only_run(run, tmp_path):
    before = {p.name: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    script = textwrap.dedent(f"""
        mount --bind {run} {run} && mount -o remount,bind,ro {run} || exit 99
        touch {run}/probe 2>/dev/null && echo "not read-only"
        export PYTHONPATH={SRC} OMP_NUM_THREADS=1
        {sys.executable} -m vheads.cli report {run} --out {tmp_path}/rep; echo "report-out rc=$?"
        {sys.executable} -m vheads.cli export {run} --format csv --out {tmp_path}/csv; echo "export rc=$?"
        {sys.executable} -m vheads.cli report {run}; echo "report-in-place rc=$?"
    """)
    r = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, timeout=300)
    assert "not read-only" not in r.stdout
    assert "report-out rc=0" in r.stdout and "export rc=0" in r.stdout, r.stdout + r.stderr
    assert "report-in-place rc=2" in r.stdout
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and "Read-only file system" in lines[0] and "--out" in lines[0], r.stderr
    assert (tmp_path / "rep" / "report.html").read_text().rstrip().endswith("</html>")
    assert (tmp_path / "csv" / "outcomes.csv").read_text().startswith("unit_id,")
    assert {p.name: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before


def test_study_on_a_damaged_store_is_one_line_and_left_untouched(tiny_random_dirs, tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "results.sqlite").write_bytes(b"\x00garbage" * 500)
    cfg = tmp_path / "c.toml"
    cfg.write_text('corpora = ["comics"]\nqueries = ["ordinal"]\nsources = ["last"]\nn_discovery = 2\nn_eval = 2\nsplits = 2\n')
    line = refused(vheads("study", cfg, "--out", out, "--model", tiny_random_dirs["qwen3_vl"], "--quiet"), "damaged", "results.sqlite")
    assert "rerun" in line
    assert (out / "results.sqlite").read_bytes() == b"\x00garbage" * 500
    assert {p.name for p in out.iterdir()} == {"results.sqlite"}  # refused before the run lock is taken: no file written


# ---- second pass: read-only means no file appears; output paths checked first -----------------------


@pytest.mark.parametrize("command", ["report", "export"])
def test_report_and_export_elsewhere_create_no_file_in_the_run_folder(run, tmp_path, command):
    assert not list(run.glob("results.sqlite-*"))  # a closed store: no WAL left
    before = {str(p.relative_to(run)): p.read_bytes() for p in run.rglob("*") if p.is_file()}
    r = vheads(command, run, "--out", tmp_path / "elsewhere")
    assert r.exit_code == 0, r.output
    assert {str(p.relative_to(run)): p.read_bytes() for p in run.rglob("*") if p.is_file()} == before  # no -wal / -shm


def test_a_store_with_a_wal_is_still_read_through_it(run, tmp_path):
    """A store whose writer has not checkpointed (a study running, or killed) keeps rows in
    its -wal file: the read-only open must see them."""
    import sqlite3

    db = sqlite3.connect(run / "results.sqlite", isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA wal_autocheckpoint=0")
    db.execute("INSERT INTO meta VALUES ('', 'probe-key', 'in-the-wal')")
    assert (run / "results.sqlite-wal").stat().st_size > 0
    from vheads.store import Store

    st = Store(run, readonly=True)
    assert st.get_meta("probe-key") == "in-the-wal"
    st.close()
    db.close()


@pytest.mark.parametrize("command,where", [(c, w) for c in ("study", "discover", "report", "export")
                                           for w in ("root", "below-a-file", "long-name") if w != "root" or c in ("study", "discover")])
def test_an_output_path_that_cannot_be_a_folder_is_one_line(run, tmp_path, command, where):
    """A model that does not exist keeps a regression from writing anything: study and
    discover would stop at the model before their first file (report and export, which
    need no model, are not pointed at the real root)."""
    (tmp_path / "notes.txt").write_text("x")
    out = {"root": "/", "below-a-file": tmp_path / "notes.txt" / "out", "long-name": tmp_path / ("n" * 300)}[where]
    fragment = {"root": "file system's root", "below-a-file": "which is a file", "long-name": "more than the file system's limit"}[where]
    args = {"study": ["study", "--model", NO_MODEL], "discover": ["discover", "--model", NO_MODEL], "report": ["report", run],
            "export": ["export", run]}[command]
    before = sorted(p.name for p in tmp_path.iterdir())
    refused(vheads(*args, "--out", out), fragment)
    assert sorted(p.name for p in tmp_path.iterdir()) == before


@pytest.mark.slow  # a study run twice (disk full, then resumed): run with VHEADS_SLOW=1
@needs_mounts
def test_a_full_disk_during_a_study_commit_is_one_line_and_the_rerun_resumes(tiny_random_dirs, tmp_path):
    """A real 400 KiB tmpfs fills while the study commits its units; after the disk is
    grown (remount) the same command resumes and computes no finished unit again."""
    from tests.hardening.test_signals import CONFIG

    cfg = tmp_path / "c.toml"
    cfg.write_text(CONFIG)
    disk, seen = tmp_path / "disk", tmp_path / "seen"
    disk.mkdir()
    run = disk / "run"
    study = f"PYTHONPATH={SRC} OMP_NUM_THREADS=1 {sys.executable} -m vheads.cli study {cfg} --out {run} --model {tiny_random_dirs['qwen3_vl']} --quiet"
    script = textwrap.dedent(f"""
        mount -t tmpfs -o size=400k tmpfs {disk} || exit 99
        {study} 2>{tmp_path}/err1; echo "first rc=$?"
        mkdir -p {seen} && cp -r {run}/. {seen}/
        mount -o remount,size=50m {disk} || exit 98
        {study} 2>{tmp_path}/err2; echo "second rc=$?"
        cp {run}/units.log {seen}/units-after.log
    """)
    r = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, timeout=900)
    assert "first rc=2" in r.stdout and "second rc=0" in r.stdout, r.stdout + r.stderr + (tmp_path / "err2").read_text()
    err = [ln for ln in (tmp_path / "err1").read_text().replace("\r", "\n").splitlines() if ln.strip() and not ln.startswith("Loading weights")]
    assert len(err) == 1 and err[0].startswith("error: the disk is full") and "rerun the same command" in err[0], err
    import sqlite3

    with sqlite3.connect(seen / "results.sqlite") as db:  # the store as the full disk left it
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        done = {u for (u,) in db.execute("SELECT unit_id FROM units")}
    logged = {ln.split(" ", 1)[1] for ln in (seen / "units.log").read_text().splitlines() if ln.startswith("done ")}
    assert logged and logged <= done, "the disk filled before the first unit: the test no longer exercises a mid-run commit"
    before = len((seen / "units.log").read_text().splitlines())
    started = {ln.split(" ", 1)[1] for ln in (seen / "units-after.log").read_text().splitlines()[before:] if ln.startswith("start ")}
    assert started and not started & logged
