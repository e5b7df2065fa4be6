"""Writes the synchronous client, ``client.py``, from the asynchronous one, ``aio.py``: each
method is written once, in ``aio.py``; ``client.py`` is its copy without ``async`` and ``await``.

    python clients/python/generate_sync.py          # rewrite client.py
    python clients/python/generate_sync.py --check  # exit 1 if client.py is out of date

The copy is made token by token (so words in strings and comments are left alone unless named
below), then formatted and its imports sorted with ruff, as the rest of the code is.
"""

import ast
import io
import re
import subprocess
import sys
import tokenize
from pathlib import Path

HERE = Path(__file__).resolve().parent
PACKAGE = HERE / "src" / "dealbroker_client"
SOURCE, TARGET = PACKAGE / "aio.py", PACKAGE / "client.py"

HEADER = (
    '"""The synchronous client: the same methods as ``AsyncDealbrokerClient``, not awaited.\n\n'
    "Generated from ``aio.py`` by ``clients/python/generate_sync.py``: change that file and run\n"
    'the script, never this one."""\n'
)
# Exact pieces of aio.py's text and what they are in the sync client; each must occur.
TEXT = {
    "import asyncio\n": "import threading\nimport time\n",
    "asyncio.Lock()": "threading.Lock()",
    "asyncio.sleep(": "time.sleep(",
}
# Names (in code, and as whole words in strings) and what they are in the sync client.
NAMES = {
    "AsyncDealbrokerClient": "DealbrokerClient",
    "AsyncClient": "Client",
    "AsyncIterator": "Iterator",
    "__aenter__": "__enter__",
    "__aexit__": "__exit__",
    "aclose": "close",
}
# Keywords that vanish, with the space after them.
DROPPED = {"async", "await"}


def _module_body(source: str) -> str:
    """The source after its docstring (the copy has its own)."""
    docstring = ast.parse(source).body[0]
    assert isinstance(docstring, ast.Expr)
    assert docstring.end_lineno is not None
    return "".join(source.splitlines(keepends=True)[docstring.end_lineno :])


def _words(text: str) -> str:
    return re.sub(r"\b(" + "|".join(NAMES) + r")\b", lambda w: NAMES[w.group(1)], text)


def unasync(source: str) -> str:
    """The sync copy of ``source``, before formatting."""
    for old, new in TEXT.items():
        if old not in source:
            raise SystemExit(f"generate_sync: {old!r} is no longer in aio.py; update TEXT")
        source = source.replace(old, new)
    lines = source.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))

    def at(position: tuple[int, int]) -> int:
        return offsets[position[0] - 1] + position[1]

    out: list[str] = []
    cursor, skip_space = 0, False
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        start, end = at(token.start), at(token.end)
        gap = source[cursor:start]
        out.append(gap.lstrip(" ") if skip_space else gap)
        skip_space = False
        if token.type == tokenize.NAME and token.string in DROPPED:
            skip_space = True
        elif token.type == tokenize.NAME:
            out.append(NAMES.get(token.string, token.string))
        elif token.type == tokenize.STRING and re.match(r"[rbRB]*[fF]", token.string):
            if re.search(r"\bawait\b", token.string):  # one token before Python 3.12
                raise SystemExit(f"generate_sync: await in an f-string, line {token.start[0]}")
            out.append(token.string)
        elif token.type in (tokenize.STRING, tokenize.COMMENT):
            out.append(_words(token.string))
        else:
            out.append(source[start:end])
        cursor = end
    out.append(source[cursor:])
    return "".join(out)


def _ruff(args: list[str], code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "ruff", *args, "--stdin-filename", str(TARGET), "-"],
        input=code,
        capture_output=True,
        text=True,
        cwd=HERE.parent.parent,  # the repository: its ruff settings
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"generate_sync: ruff {' '.join(args)} failed:\n{done.stderr}")
    return done.stdout


def generate() -> str:
    """What ``client.py`` should hold."""
    code = HEADER + unasync(_module_body(SOURCE.read_text()))
    code = _ruff(["check", "--fix", "--select", "I,F401", "--quiet"], code)
    return _ruff(["format", "--quiet"], code)


def main(argv: list[str]) -> int:
    code = generate()
    if "--check" in argv:
        if TARGET.read_text() != code:
            print("client.py is out of date: run python clients/python/generate_sync.py")  # noqa: T201
            return 1
        return 0
    TARGET.write_text(code)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
