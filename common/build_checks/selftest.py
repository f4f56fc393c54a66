"""`docker run --rm IMAGE selftest [--card CARD] [--json]`: the image proves itself.

Runs this image's own entrypoint the way the platform runs it, on the two small models bundled
with the image (metadata only, under selftest/models/ beside the runtime package: a model saved
by transformers 5 and a clean one), with vLLM replaced by a recorder shipped in the image
(selftest_recorder.py: nothing is exec'd from the temp dir, which the platform may mount noexec),
and checks what the container would exec. The release gate runs it as the platform runs the image:
a uid the image does not know, a read-only root, a tmpfs /tmp without exec, no network:

  python        the image's Python can run the runtime package (3.10 or newer)
  import        that Python imports the package without PYTHONPATH, from any directory
                (`bootstrap.py check`, the entrypoint's own guard)
  profile       the baked profile is the card's: IMAGE_CARD names it, <card>.json says so, and it
                is CARD when --card is given
  v5-generic    the transformers-5 model: vLLM is exec'd with exactly the plan the launcher wrote
                (report.json), and on an engine older than transformers 5 the plan holds a
                verified tokenizer overlay (R3/R3b)
  457-generic   the clean model gets nothing: `vllm serve MODEL ARGS` and the environment as given
  (455-generic)  (a model is clean only for an engine that reads its files as written: one saved
                by transformers 4.57 writes `dtype`, which the BI-100 engine's 4.55 does not read,
                so an engine that reads only `torch_dtype` gets the one saved by 4.55)
  models        the bundled models were not written (red line 1)

One line per check (`ok   NAME: detail` or `FAIL NAME: detail`); exit 1 when any check fails.
--json prints one object instead, for the release gate:
{"passed": bool, "card": str|null, "checks": [{"name", "ok", "detail"}],
 "models": {NAME: {"repairs": [codes], "findings": [codes], "args": [...], "env": {...}}},
 "runtime": {"uid", "gid", "read_only_root", "tmp_noexec"}}

Standard library only; runs on the image's Python (3.10 on the BI-100 base). It is started as a
file by entrypoint.sh, like bootstrap.py, so it finds the package without PYTHONPATH.
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__" and not __package__:
    # Started as a file: Python put common/ first on sys.path, whose module names (profile, log)
    # would shadow the standard library; the package root takes that place (as in bootstrap.py).
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import argparse  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE = os.path.dirname(HERE)  # common/
HOME = os.path.dirname(PACKAGE)  # the image's compat home: entrypoint.sh, common/, selftest/
ENTRYPOINT = os.path.join(HOME, "entrypoint.sh")
BOOTSTRAP = os.path.join(PACKAGE, "bootstrap.py")
MODELS = os.path.join(HOME, "selftest", "models")
TRANSFORMERS5_MODEL = "v5-generic"
# The clean model of an engine, by whether its transformers reads config.json's `dtype` (the
# profile's reads.dtype): saved by 4.57 (`dtype`), or by 4.55 (`torch_dtype` only).
CLEAN_MODELS = {True: "457-generic", False: "455-generic"}
# What the platform passes after the image name.
PLATFORM_ARGS = ["--port", "8000", "--served-model-name", "selftest"]
# Variables bash itself maintains; a shell between the platform and vLLM may change them.
SHELL_VARS = {"PWD", "OLDPWD", "_", "SHLVL"}
# Variables the self-test sets for its runs (the rest of the environment is the container's).
OURS = ("MODEL_DIR", "COMPAT_VLLM", "COMPAT_WORK_DIR", "COMPAT_CARD", "COMPAT_DISABLE", "COMPAT_SELFTEST_RECORD")
# vLLM's stand-in: shipped executable beside this file, never written into the temp dir, which
# the platform may mount noexec (the gate runs the self-test so). It writes what it was exec'd
# with to COMPAT_SELFTEST_RECORD, a file in the scratch dir: only the data needs the temp dir.
RECORDER = os.path.join(HERE, "selftest_recorder.py")
RUN_TIMEOUT_S = 600
TOKENIZER_REPAIRS = ("R3", "R3b")


class Checks:
    """The results, printed as they come unless the caller wants one JSON object at the end."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.results: List[Dict[str, Any]] = []
        self.models: Dict[str, Dict[str, Any]] = {}
        self.card: Optional[str] = None  # the image's card, once the profile check passed

    def add(self, name: str, ok: bool, detail: str) -> bool:
        self.results.append({"name": name, "ok": ok, "detail": detail})
        if not self.quiet:
            print(f"{'ok  ' if ok else 'FAIL'} {name}: {detail}", flush=True)
        return ok

    @property
    def passed(self) -> bool:
        return bool(self.results) and all(r["ok"] for r in self.results)


def _tail(text: str, lines: int = 8) -> str:
    kept = [line for line in text.strip().splitlines() if line.strip()][-lines:]
    return " | ".join(kept) if kept else "no output"


def check_python(checks: Checks) -> None:
    version = ".".join(str(n) for n in sys.version_info[:3])
    checks.add("python", sys.version_info >= (3, 10), f"Python {version} at {sys.executable}")


def check_import(checks: Checks) -> None:
    """The entrypoint's guard, as the container runs it but without any PYTHONPATH and from /."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    try:
        proc = subprocess.run(
            [sys.executable, BOOTSTRAP, "check"], env=env, cwd="/", stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120
        )
    except (OSError, subprocess.SubprocessError) as exc:
        checks.add("import", False, f"{BOOTSTRAP} check could not run: {exc}")
        return
    if proc.returncode == 0:
        checks.add("import", True, f"{sys.executable} imports the runtime package from {HOME} without PYTHONPATH")
    else:
        checks.add("import", False, f"{BOOTSTRAP} check exited {proc.returncode}: {_tail(proc.stderr)}")


def check_profile(checks: Checks, expected: Optional[str]) -> Optional[Any]:
    """The baked profile, or None when it is not this card's (or not there)."""
    try:
        from common.engine.profile import IMAGE_CARD_FILE, image_card, load_profile
    except Exception as exc:  # noqa: B902 - a broken package is a failed check, not a traceback
        checks.add("profile", False, f"common.engine.profile cannot be imported ({type(exc).__name__}: {exc})")
        return None
    card = image_card()
    if not card:
        checks.add("profile", False, f"no {IMAGE_CARD_FILE}: the build's bake_profile step did not run here")
        return None
    try:
        profile = load_profile(card)
    except ValueError as exc:
        checks.add("profile", False, f"IMAGE_CARD names {card!r}: {exc}")
        return None
    if profile.card != card:
        checks.add("profile", False, f"IMAGE_CARD names {card!r} but its profile is card {profile.card!r}'s")
        return None
    if expected and card != expected:
        checks.add("profile", False, f"the image was baked for card {card!r}, not {expected!r}")
        return None
    checks.card = card
    archs = "unknown" if profile.architectures is None else str(len(profile.architectures))
    checks.add("profile", True, f"{card}: vLLM {profile.vllm_version}, transformers {profile.transformers_version}, {archs} architectures")
    return profile


def tree_digest(path: str) -> str:
    """Names, kinds, sizes, mtimes and contents of a tree: any write to it changes the digest
    (red line 1; the unit tests use it too). Files of 50 MiB and more count by size and mtime."""
    h = hashlib.sha256()
    for root, dirs, files in os.walk(path):
        dirs.sort()
        for name in sorted(dirs + files):
            full = os.path.join(root, name)
            st = os.lstat(full)
            h.update(f"{os.path.relpath(full, path)}|{st.st_mode}|{st.st_size}|{st.st_mtime_ns}".encode())
            if os.path.isfile(full) and not os.path.islink(full) and st.st_size < 50 * 1024 * 1024:
                with open(full, "rb") as fh:
                    h.update(fh.read())
    return h.hexdigest()


def run_entrypoint(model: str, scratch: str, name: str) -> Tuple[Dict[str, str], Optional[Dict[str, Any]], str, str]:
    """Start the entrypoint on `model` as the platform would, vLLM being the recorder:
    (the environment given, what was exec'd or None, the work dir, the entrypoint's log)."""
    record = os.path.join(scratch, f"{name}.exec.json")
    work = os.path.join(scratch, f"work-{name}")
    env = {k: v for k, v in os.environ.items() if k not in OURS}
    env.setdefault("COMPAT_HOME", HOME)  # the entrypoint's own default inside the image
    env.update(MODEL_DIR=model, COMPAT_VLLM=RECORDER, COMPAT_WORK_DIR=work, COMPAT_SELFTEST_RECORD=record)
    try:
        proc = subprocess.run(
            [ENTRYPOINT, *PLATFORM_ARGS],
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            errors="backslashreplace",
            timeout=RUN_TIMEOUT_S,
        )
        log = f"exit {proc.returncode}: {_tail(proc.stderr)}"
    except subprocess.TimeoutExpired:
        log = f"still running after {RUN_TIMEOUT_S}s"
    except OSError as exc:
        log = f"{ENTRYPOINT} cannot be started ({exc.strerror})"
    called = None
    if os.path.exists(record):
        try:
            with open(record, encoding="utf-8") as fh:
                called = json.load(fh)
        except (OSError, ValueError) as exc:
            log = f"the recorder's file is unreadable ({exc}); {log}"
    return env, called, work, log


def _report(work: str) -> Optional[Dict[str, Any]]:
    runs = sorted(os.listdir(work)) if os.path.isdir(work) else []
    for run in runs:
        path = os.path.join(work, run, "report.json")
        if os.path.isfile(path):
            try:
                with open(path, encoding="utf-8") as fh:
                    return json.load(fh)
            except (OSError, ValueError):
                return None
    return None


def _env_changes(given: Dict[str, str], got: Dict[str, str]) -> List[str]:
    given = {k: v for k, v in given.items() if k not in SHELL_VARS}
    got = {k: v for k, v in got.items() if k not in SHELL_VARS}
    changes = [f"+{k}" for k in sorted(set(got) - set(given))]
    changes += [f"-{k}" for k in sorted(set(given) - set(got))]
    changes += [f"~{k}" for k in sorted(k for k in set(given) & set(got) if given[k] != got[k])]
    return changes


def check_transformers5_model(checks: Checks, profile: Optional[Any], scratch: str) -> None:
    name = TRANSFORMERS5_MODEL
    model = os.path.join(MODELS, name)
    env, called, work, log = run_entrypoint(model, scratch, name)
    if called is None:
        checks.add(name, False, f"the entrypoint did not exec vLLM ({log})")
        return
    argv, report = called["argv"], _report(work)
    if report is None:
        checks.add(name, False, f"vLLM was exec'd without the launcher's report.json in {work} (the preflight did not run: {log})")
        return
    verified = [r["code"] for r in report.get("repairs", []) if r.get("verified")]
    checks.models[name] = {
        "repairs": verified,
        "findings": [f["code"] for f in report.get("findings", [])],
        "args": list(report.get("args", [])),
        "env": dict(report.get("env", {})),
    }
    expected = [argv[0], "serve", report.get("model_path"), *report.get("args", []), *report.get("user_args", [])]
    if argv != expected or report.get("user_args") != PLATFORM_ARGS:
        checks.add(name, False, f"exec'd {argv[1:]}, the launcher's plan was {expected[1:]}")
        return
    missing_env = {k: v for k, v in report.get("env", {}).items() if called["env"].get(k) != v}
    if missing_env:
        checks.add(name, False, f"the plan's environment did not reach vLLM: {missing_env}")
        return
    if profile is not None and report.get("card") != profile.card:
        checks.add(name, False, f"the launcher used card {report.get('card')!r}, not the image's {profile.card!r}")
        return
    major = (profile.transformers_version if profile else "").split(".")[0]
    needs_overlay = not major.isdigit() or int(major) < 5  # unknown: the engine is taken to be older
    if needs_overlay and not (set(verified) & set(TOKENIZER_REPAIRS) and "--tokenizer" in argv):
        version = profile.transformers_version if profile else "unknown"
        checks.add(
            name,
            False,
            f"no verified tokenizer overlay (R3/R3b) for a transformers-5 tokenizer on an engine "
            f"with transformers {version}; repairs {', '.join(verified) or 'none'}; {log}",
        )
        return
    findings = checks.models[name]["findings"]
    checks.add(
        name,
        True,
        f"repairs {', '.join(verified) or 'none'}"
        + (f" (findings {', '.join(findings)})" if findings else "")
        + f": vllm {' '.join(argv[1:])}",
    )


def clean_model(profile: Optional[Any]) -> str:
    """The bundled model that is clean for this engine (457-generic where the profile is unknown)."""
    return CLEAN_MODELS[getattr(profile, "reads_dtype_key", None) is not False]


def check_clean_model(checks: Checks, name: str, scratch: str) -> None:
    model = os.path.join(MODELS, name)
    env, called, work, log = run_entrypoint(model, scratch, name)
    if called is None:
        checks.add(name, False, f"the entrypoint did not exec vLLM ({log})")
        return
    argv = called["argv"]
    report = _report(work) or {}
    checks.models[name] = {
        "repairs": [r["code"] for r in report.get("repairs", []) if r.get("verified")],
        "findings": [f["code"] for f in report.get("findings", [])],
        "args": argv[3 : len(argv) - len(PLATFORM_ARGS)],
        "env": {},
    }
    if argv[1:] != ["serve", model, *PLATFORM_ARGS]:
        checks.add(name, False, f"a clean model got more than the platform's arguments: {argv[1:]}")
        return
    changes = _env_changes(env, called["env"])
    if changes:
        checks.add(name, False, f"a clean model's environment was changed: {', '.join(changes)}")
        return
    if not report:
        checks.add(name, False, f"vLLM was exec'd untouched but the preflight did not run ({log})")
        return
    checks.add(name, True, f"nothing added: vllm {' '.join(argv[1:])}, the environment as given")


def runtime() -> Dict[str, Any]:
    """How the container runs: its uid and gid, and whether the root and the temp dir are mounted
    read-only and noexec (the gate runs the image as the platform does; its report says so)."""
    facts: Dict[str, Any] = {"uid": os.getuid(), "gid": os.getgid()}
    for key, path, flag in (("read_only_root", "/", "ST_RDONLY"), ("tmp_noexec", tempfile.gettempdir(), "ST_NOEXEC")):
        try:
            facts[key] = bool(os.statvfs(path).f_flag & getattr(os, flag))
        except (OSError, AttributeError):
            facts[key] = None
    return facts


def run(expected_card: Optional[str], quiet: bool) -> Checks:
    checks = Checks(quiet)
    check_python(checks)
    check_import(checks)
    profile = check_profile(checks, expected_card)
    clean = clean_model(profile)
    missing = [n for n in (TRANSFORMERS5_MODEL, clean) if not os.path.isdir(os.path.join(MODELS, n))]
    if missing:
        checks.add("models", False, f"{', '.join(missing)} missing under {MODELS} (the build bundles them)")
        return checks
    before = {n: tree_digest(os.path.join(MODELS, n)) for n in (TRANSFORMERS5_MODEL, clean)}
    scratch = tempfile.mkdtemp(prefix="compat-selftest-")
    try:
        check_transformers5_model(checks, profile, scratch)
        check_clean_model(checks, clean, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    changed = [n for n, d in before.items() if tree_digest(os.path.join(MODELS, n)) != d]
    checks.add("models", not changed, f"{', '.join(changed)} written by the runs" if changed else f"{MODELS} unchanged")
    return checks


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="selftest", description="check this image the way the platform runs it")
    parser.add_argument("--card", help="the card the image must be (default: whatever it was baked for)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a line per check")
    opts = parser.parse_args(argv)
    checks = run(opts.card, quiet=opts.json)
    if opts.json:
        report = {"passed": checks.passed, "card": checks.card, "checks": checks.results, "models": checks.models, "runtime": runtime()}
        print(json.dumps(report, indent=1))
    else:
        print(f"selftest: {'passed' if checks.passed else 'FAILED'} ({sum(r['ok'] for r in checks.results)}/{len(checks.results)} checks)")
    return 0 if checks.passed else 1


if __name__ == "__main__":
    sys.exit(main())
