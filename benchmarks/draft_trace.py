"""The built-in model's draft trace, recorded and replayed through the automatic draft length's
controller: ``tests/helpers/draft_trace.py`` (its docstring has the commands)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.helpers.draft_trace import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main())
