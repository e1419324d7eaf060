"""Write the ``--map`` JSON schema (``tck.adapters.param_map.MAP_SCHEMA``) to
docs/map.schema.json, for editors and validators outside tck. Run after changing the schema,
Config or Conventions; tests/adapters/test_param_map.py fails while the file is stale."""

from __future__ import annotations

import json
from pathlib import Path

from tck.adapters.param_map import MAP_SCHEMA

TARGET = Path(__file__).resolve().parents[1] / "docs" / "map.schema.json"

if __name__ == "__main__":
    TARGET.write_text(json.dumps(MAP_SCHEMA, indent=2) + "\n")
    print(f"wrote {TARGET}")
