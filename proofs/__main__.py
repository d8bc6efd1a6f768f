"""`python -m proofs [SUBSTRING ...]`: check every identity (or those whose name contains a
substring); exit status 1 if any fails."""
from __future__ import annotations

import sys

from proofs import all_identities, run


def main(argv: list[str] | None = None) -> int:
    patterns = sys.argv[1:] if argv is None else argv
    identities = [x for x in all_identities() if not patterns or any(p in x.name for p in patterns)]
    if not identities:
        print(f"no identity matches {patterns}", file=sys.stderr)
        return 1
    return 1 if run(identities) else 0


if __name__ == "__main__":
    sys.exit(main())
