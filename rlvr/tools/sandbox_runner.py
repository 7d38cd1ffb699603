"""Runs one cell of code inside the sandbox, as a notebook would (ReTool style): the value of
a final bare expression is printed; a traceback shows only the cell's frames and below.

The launcher passes this file's text as `python -I -c RUNNER CODE MEMORY_MB`, so it runs
where the rlvr package may not be readable; standard library only.
"""

import ast
import linecache
import sys
import traceback

CELL = "<cell>"


def run(code: str, memory_mb: str) -> int:
    linecache.cache[CELL] = (len(code), None, code.splitlines(True), CELL)
    try:
        tree = ast.parse(code, CELL)
    except (SyntaxError, ValueError) as error:
        print("".join(traceback.format_exception_only(error)), end="", file=sys.stderr)
        return 1
    last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    namespace = {"__name__": "__main__", "__builtins__": __builtins__}
    sys.argv = [""]
    sys.path.insert(0, "")  # the working directory: the cell may import what it wrote
    try:
        exec(compile(tree, CELL, "exec"), namespace)
        if last is not None:
            value = eval(compile(ast.Expression(last.value), CELL, "eval"), namespace)
            if value is not None:
                print(repr(value))
    except SystemExit:
        raise
    except BaseException as error:
        frames = error.__traceback__
        while frames is not None and frames.tb_frame.f_code.co_filename != CELL:
            frames = frames.tb_next  # the runner's own frames
        traceback.print_exception(type(error), error, frames)
        if isinstance(error, MemoryError):
            print(f"MemoryError: the program ran out of its {memory_mb} MB", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":  # `python -c` runs it as __main__
    sys.exit(run(sys.argv[1], sys.argv[2]))
