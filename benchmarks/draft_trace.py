"""The built-in model's draft trace, recorded and replayed through the automatic draft length's
controller: ``mtp_llm.bench.draft_trace`` (its docstring has the commands)."""

from mtp_llm.bench.draft_trace import main

if __name__ == "__main__":
    raise SystemExit(main())
