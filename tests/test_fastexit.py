"""recpipe.fastexit: a process ended without finalization keeps what a normal exit guarantees (threads
finished, atexit handlers run, buffered files flushed, the exit code), and a failing one exits normally."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _child(tmp_path: Path, args: list[str], path: str = str(ROOT)) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=60, cwd=tmp_path,
        env={"PYTHONPATH": path, "PATH": "/usr/bin:/bin"},
    )  # fmt: skip


def _python(tmp_path: Path, code: str) -> subprocess.CompletedProcess:
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent(code))
    return _child(tmp_path, [str(script)])


def test_exit_now_keeps_threads_atexit_files_and_the_code(tmp_path: Path) -> None:
    proc = _python(
        tmp_path,
        """
        import atexit, threading, time
        from recpipe.fastexit import exit_now

        LOG = open("global.txt", "w")  # never closed: finalization would have flushed it
        LOG.write("kept")
        open("dropped.txt", "w").write("unreferenced")
        atexit.register(lambda: open("atexit.txt", "w").write("ran"))

        def slow():
            time.sleep(0.3)
            open("thread.txt", "w").write("joined")

        threading.Thread(target=slow).start()
        print("buffered line", end="")
        exit_now(3)
        """,
    )
    assert proc.returncode == 3, proc.stderr
    assert proc.stdout == "buffered line"
    for name, text in [("global.txt", "kept"), ("dropped.txt", "unreferenced"), ("atexit.txt", "ran"),
                       ("thread.txt", "joined")]:  # fmt: skip
        assert (tmp_path / name).read_text() == text, name


def _component(tmp_path: Path, body: str) -> Path:
    """A module run as ``python -m kfp.dsl.executor_main`` is (the name ends_fast checks), calling a
    function whose body is wrapped in ``ends_fast``."""
    pkg = tmp_path / "kfp_like" / "kfp" / "dsl"
    pkg.mkdir(parents=True)
    for folder in (pkg.parent, pkg):
        (folder / "__init__.py").write_text("")
    (pkg / "executor_main.py").write_text(
        textwrap.dedent(
            """
            import atexit, sys
            from recpipe.fastexit import ends_fast

            atexit.register(lambda: open("before.txt", "w").write("ran"))  # registered before: runs after


            class Finalized:  # a module global's __del__ runs at finalization only: its file says which exit
                def __del__(self, open=open):  # builtins are gone by then
                    open("finalized.txt", "w").write("normal exit")


            KEEP = Finalized()

            def component():
                with ends_fast():
            """
        )
        + textwrap.indent(textwrap.dedent(body), " " * 8)
        + "\ncomponent()\nopen('outputs.txt', 'w').write('written')\n"
    )
    return tmp_path / "kfp_like"


def test_a_component_that_returns_ends_fast_with_its_files(tmp_path: Path) -> None:
    root = _component(tmp_path, 'open("work.txt", "w").write("done")\nreturn 1\n')
    proc = _child(tmp_path, ["-m", "kfp.dsl.executor_main"], f"{root}:{ROOT}")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "work.txt").read_text() == "done"
    assert (tmp_path / "outputs.txt").read_text() == "written"
    assert (tmp_path / "before.txt").read_text() == "ran"
    assert not (tmp_path / "finalized.txt").exists()  # it did end fast


def test_a_component_that_raises_exits_normally_with_its_traceback(tmp_path: Path) -> None:
    root = _component(tmp_path, 'raise RuntimeError("the stage failed")\n')
    proc = _child(tmp_path, ["-m", "kfp.dsl.executor_main"], f"{root}:{ROOT}")
    assert proc.returncode == 1
    assert "RuntimeError: the stage failed" in proc.stderr
    assert not (tmp_path / "outputs.txt").exists()
    assert (tmp_path / "finalized.txt").exists()  # the normal way


def test_a_raise_after_the_function_returned_keeps_the_failure(tmp_path: Path) -> None:
    """kfp writes the outputs after the function returns: a failure there must still fail the step."""
    root = _component(tmp_path, "return 1\n")
    main = root / "kfp" / "dsl" / "executor_main.py"
    main.write_text(main.read_text().replace("open('outputs.txt'", "raise OSError('disk full'); open('x'"))
    proc = _child(tmp_path, ["-m", "kfp.dsl.executor_main"], f"{root}:{ROOT}")
    assert proc.returncode == 1 and "OSError: disk full" in proc.stderr


def test_the_same_function_in_another_process_leaves_its_exit_alone(tmp_path: Path) -> None:
    """Called outside kfp's executor (a test calling a component's python_func), ends_fast does nothing:
    that process's own failing exit code stands."""
    proc = _python(
        tmp_path,
        """
        import sys
        from recpipe.fastexit import ends_fast

        with ends_fast():
            pass
        sys.exit(5)
        """,
    )
    assert proc.returncode == 5, proc.stderr
