"""The local stand-in bases' layout, read from the tar stream `docker import` is given (no daemon
needed): what any uid can run, what never goes in, where the vendor trees land, and when a base
is made again. The image tier runs containers of the real bases."""

import io
import os
import stat
import tarfile
from pathlib import Path

import pytest

from compat_build import local_bases
from compat_build.local_bases import Base, base_key, load_spec, write_base_tar


def fake_engine(tmp_path: Path) -> Path:
    """A venv-shaped tree (pyvenv.cfg naming its interpreter's home) whose files only root may read."""
    home = tmp_path / "python-home"
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "python3.10").write_text("#!/bin/sh\n")
    (home / "lib" / "python3.10" / "site-packages").mkdir(parents=True)
    (home / "lib" / "python3.10" / "site-packages" / "system-only.py").write_text("")
    (home / "lib" / "python3.10" / "os.py").write_text("")
    venv = tmp_path / "venvs" / "engine055-0123456789ab"
    site = venv / "lib" / "python3.10" / "site-packages"
    site.mkdir(parents=True)
    (venv / "bin").mkdir()
    (venv / "bin" / "python").symlink_to(home / "bin" / "python3.10")
    (venv / "pyvenv.cfg").write_text(f"home = {home / 'bin'}\ninclude-system-site-packages = false\n")
    (venv / "bin" / "vllm").write_text(f"#!{venv}/bin/python\n")
    (site / "vllm.py").write_text("")
    for path in [venv, *venv.rglob("*")]:
        if not path.is_symlink():
            os.chmod(path, 0o700 if path.is_dir() or path.parent.name == "bin" else 0o600)
    return venv


def fake_rootfs(tmp_path: Path, closed: str) -> Path:
    """A Debian-shaped tree in which `closed`, the top directory above the engine, only root may
    enter (as /root is in Debian)."""
    fs = tmp_path / "fs"
    for d in ("root", "etc", "var/cache/apt/archives", "var/lib/apt/lists", closed):
        (fs / d).mkdir(parents=True, exist_ok=True)
    os.chmod(fs / "root", 0o700)
    os.chmod(fs / closed, 0o700)
    (fs / "etc" / "shadow").write_text("root:*:1::::::\n")
    os.chmod(fs / "etc" / "shadow", 0o640)
    (fs / "var" / "cache" / "apt" / "archives" / "g++.deb").write_text("x" * 100)
    (fs / "var" / "lib" / "apt" / "lists" / "index").write_text("x")
    return fs


def members(tmp_path: Path, base: Base):
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        write_base_tar(tar, str(fake_rootfs(tmp_path, base.venv_link.strip("/").split("/")[0])), base)
    buffer.seek(0)
    with tarfile.open(fileobj=buffer) as tar:
        return {m.name: m for m in tar.getmembers()}


def test_any_uid_reaches_the_engine_and_nothing_else_is_opened(tmp_path):
    venv = fake_engine(tmp_path)
    got = members(tmp_path, Base("engine055", str(venv), "test", ("ixformer",)))
    arc = str(venv).strip("/")
    # The directories above the engine (/root, 0700 in Debian, where the venv cache is) are
    # opened to all; the rest of the rootfs keeps its modes.
    assert stat.S_IMODE(got[arc.split("/")[0]].mode) == 0o755
    assert stat.S_IMODE(got["root"].mode) == (0o755 if arc.startswith("root/") else 0o700)
    for parent in Path(arc).parents:
        if str(parent) != ".":
            assert stat.S_IMODE(got[str(parent)].mode) & 0o555 == 0o555, parent
    assert stat.S_IMODE(got[f"{arc}/bin/vllm"].mode) & 0o555 == 0o555
    assert stat.S_IMODE(got[f"{arc}/lib/python3.10/site-packages/vllm.py"].mode) & 0o444 == 0o444
    # The rootfs keeps its own modes; package caches and lists never go in.
    assert stat.S_IMODE(got["etc/shadow"].mode) == 0o640
    assert "var/cache/apt/archives" in got and not any(n.startswith("var/cache/apt/archives/") for n in got)
    assert not any(n.startswith("var/lib/apt/lists/") for n in got)
    # The interpreter's own site-packages is not the venv's: left out.
    home = str(tmp_path / "python-home").strip("/")
    assert f"{home}/lib/python3.10/os.py" in got and f"{home}/lib/python3.10/site-packages/system-only.py" not in got
    # The vendor tree lands in the venv's site-packages, in the base only.
    assert f"{arc}/lib/python3.10/site-packages/ixformer/functions/__init__.py" in got
    assert not (venv / "lib" / "python3.10" / "site-packages" / "ixformer").exists()
    assert len(got) == len(set(got))  # `docker import` refuses a path twice


def test_a_base_is_made_again_only_when_what_it_is_made_of_changes(tmp_path, monkeypatch):
    rootfs, _ = load_spec()
    venv = fake_engine(tmp_path)
    base = Base("engine055", str(venv), "test", ("ixformer",))
    key = base_key(rootfs, base)
    assert base_key(rootfs, base) == key
    # A rebuilt venv is a new cache directory (scripts/make-venv.sh keys it by its spec).
    rebuilt = venv.rename(venv.with_name("engine055-ba9876543210"))
    assert base_key(rootfs, Base("engine055", str(rebuilt), "test", ("ixformer",))) != key
    assert base_key(dict(rootfs, packages=[*rootfs["packages"], "curl"]), Base("engine055", str(rebuilt), "test", ("ixformer",))) != (
        base_key(rootfs, Base("engine055", str(rebuilt), "test", ("ixformer",)))
    )
    monkeypatch.setattr(local_bases, "LAYOUT", local_bases.LAYOUT + 1)
    assert base_key(rootfs, Base("engine055", str(rebuilt), "test", ("ixformer",))) != key


def test_every_card_has_a_base_made_of_its_snapshot_venv():
    from compat_build import manifest

    m = manifest.load()
    _, bases = load_spec()
    for card in manifest.card_names(m):
        assert local_bases.base_for_card(m.cards[card], bases).venv_link == m.cards[card].snapshot_env


def test_make_images_builds_every_card_once_on_its_own_base():
    """`make images` builds each base's cards (compat_build.images --on-base) as the base is made:
    together the bases carry every card of the matrix, each card on one; a base not in the spec is
    said, never an empty build."""
    from compat_build import manifest

    m = manifest.load()
    _, bases = load_spec()
    carried = [card for base in bases for card in local_bases.cards_on(base)]
    assert sorted(carried) == sorted(manifest.card_names(m))
    assert local_bases.cards_on("engine055") == ["iluvatar-bi100"]
    makefile = (Path(__file__).parents[2] / "Makefile").read_text()
    for base in bases:
        assert f"images-on-{base}: base-{base}" in makefile, base
    with pytest.raises(local_bases.BaseError, match="no base 'engine099'"):
        local_bases.cards_on("engine099")


def test_an_import_says_how_far_its_stream_is(monkeypatch):
    """`docker import` of a base is minutes of silence otherwise: the stream counts what goes
    through it and says so, at most every PROGRESS_EVERY_S."""
    monkeypatch.setattr(local_bases, "PROGRESS_EVERY_S", 0.0)
    sink, out = io.BytesIO(), io.StringIO()
    progress = local_bases._Progress(sink, 4 * local_bases.GB, "importing enginex-compat/base-x:k", out)
    progress.write(b"x" * (1 << 20))
    assert sink.getvalue() == b"x" * (1 << 20) and progress.sent == 1 << 20
    assert out.getvalue().startswith("local-bases: importing enginex-compat/base-x:k: 0.0 of about 4.0 GB sent (0%, ")


def test_debootstrap_says_each_phase_and_keeps_its_last_lines(monkeypatch):
    out = io.StringIO()
    lines = [
        "I: Retrieving InRelease \n",
        "I: Retrieving Packages \n",
        "W: a warning\n",
        "I: Unpacking base-files...\n",
        "I: Configuring libc6...\n",
    ]
    tail = local_bases._debootstrap_progress(iter(lines), out)
    said = out.getvalue().splitlines()
    assert said == [
        "local-bases: debootstrap: Retrieving InRelease",
        "local-bases: debootstrap: Unpacking base-files...",
        "local-bases: debootstrap: Configuring libc6...",
    ]
    assert tail[-3:] == ["W: a warning", "I: Unpacking base-files...", "I: Configuring libc6..."]


def test_a_long_step_without_the_space_it_needs_stops_first_and_says_what_frees_it(tmp_path):
    try:
        local_bases.need_free(str(tmp_path / "not-yet" / "made"), 1 << 60, "importing a base")
    except local_bases.BaseError as exc:
        assert f"importing a base needs about {(1 << 60) / local_bases.GB:.1f} GB free at {tmp_path}" in str(exc)
        assert "`make docker-prune`" in str(exc)
    else:
        raise AssertionError("no BaseError")
    local_bases.need_free(str(tmp_path), 1, "anything")  # enough: nothing said
