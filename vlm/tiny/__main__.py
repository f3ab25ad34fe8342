"""`python -m vlm.tiny`: write every tiny checkpoint (if missing) and print where it is."""

from vlm.tiny import ensure_tiny, flavours

for flavour in flavours():
    print(flavour, ensure_tiny(flavour))
