"""Write docs/schema.md's content to stdout: `python -m batchrun.ledger.schema_doc > docs/schema.md`."""

import sys

from .schema import schema_markdown

if __name__ == "__main__":
    sys.stdout.write(schema_markdown())
