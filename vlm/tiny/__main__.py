"""`python -m vlm.tiny`: write every tiny checkpoint (if missing) and print where it is."""

from vlm.tiny import WRITERS, ensure_tiny

for flavour in WRITERS:
    print(flavour, ensure_tiny(flavour))
