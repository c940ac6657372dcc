"""The published ``config.json`` of one or more models per family, stored as files.

Each file in ``public_configs/`` is named ``<org>--<name>.json`` after the Hugging Face
repository it comes from (`source` gives the address), and holds the file as published there,
keys that only name tokens, dtypes or training settings included: the estimator must ignore
them. They are the independent copy the presets are compared with (the presets in
``inferbook.model.presets_families`` are typed separately, keeping only the keys that decide
a size), and the input of the estimator tests, which compare ``inferbook estimate --config``
with transformers' own model built from the same dictionary on the ``meta`` device.
"""

import json
from pathlib import Path

FOLDER = Path(__file__).with_name("public_configs")


def source(name: str) -> str:
    """Where the stored config of repository `name` ("org/model") was published."""
    return f"https://huggingface.co/{name}/blob/main/config.json"


CONFIGS = {path.stem.replace("--", "/"): json.loads(path.read_text())
           for path in sorted(FOLDER.glob("*.json"))}
