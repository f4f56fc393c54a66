"""Install a stand-in for the distribution `pyairports` into this venv, before anything asks for it.

Why: vLLM 0.5.5 imports outlines (guided decoding), outlines 0.0.46 imports
`pyairports.airports.AIRPORT_LIST` at import time, and the only `pyairports` on PyPI (0.0.1) is a
placeholder that ships no `pyairports` module at all: it installs top-level packages named
`sample` and `tests` and a `byted-wandb` console script instead. With it `import vllm` fails
(`No module named 'pyairports'`), and a stray top-level `tests` package could shadow a project's
own. The stand-in is the module outlines reads (an empty airport list: only the airport-code
regex type of outlines uses it) plus a dist-info named pyairports 0.0.1, so pip counts the
requirement as met and never fetches the placeholder.

usage: python pyairports_stub.py   (with the venv's python)
"""

import sysconfig
from pathlib import Path

MODULE = '"""Stand-in for PyPI\'s empty pyairports placeholder (see enginex-compat envs/engine055)."""\n'
AIRPORTS = "AIRPORT_LIST = []\n"
METADATA = "Metadata-Version: 2.1\nName: pyairports\nVersion: 0.0.1\nSummary: enginex-compat stand-in: AIRPORT_LIST = []\n"


def main() -> None:
    site = Path(sysconfig.get_paths()["purelib"])
    files = {
        "pyairports/__init__.py": MODULE,
        "pyairports/airports.py": AIRPORTS,
        "pyairports-0.0.1.dist-info/METADATA": METADATA,
        "pyairports-0.0.1.dist-info/INSTALLER": "enginex-compat\n",
        "pyairports-0.0.1.dist-info/top_level.txt": "pyairports\n",
    }
    record = [f"{name},," for name in files] + ["pyairports-0.0.1.dist-info/RECORD,,"]
    files["pyairports-0.0.1.dist-info/RECORD"] = "\n".join(record) + "\n"
    for name, text in files.items():
        (site / name).parent.mkdir(parents=True, exist_ok=True)
        (site / name).write_text(text)
    print(f"pyairports stand-in installed in {site}")


if __name__ == "__main__":
    main()
