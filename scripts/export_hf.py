"""Export a trained run as an HF Llava folder (`LlavaForConditionalGeneration` + `AutoProcessor`).

    python scripts/export_hf.py runs/NAME OUT_DIR [--dtype bfloat16]

Then, in transformers:

    model = LlavaForConditionalGeneration.from_pretrained(OUT_DIR)
    processor = AutoProcessor.from_pretrained(OUT_DIR, backend="pil")   # the run's exact image preprocessing
    messages = [{"role": "user", "content": [{"type": "image", "image": image}, {"type": "text", "text": question}]}]
    inputs = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True,
                                           return_tensors="pt")
    model.generate(**inputs, max_new_tokens=32, do_sample=False)

Images: decode them as the run's training did, `image = data.image_decode.decode_image(path)` (EXIF orientation,
16-bit and float images scaled, transparency composited over white). HF's processor composites transparency over
white too, but neither turns EXIF-oriented photos upright nor scales 16-bit images.

Supported: a timm CLIP or SigLIP encoder with projector=mlp (LoRA adapters are merged); anything else is
refused with the reason (vlm/hf_llava.py).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from core.safe_load import UnsafeConfigError  # noqa: E402
from core.weights import WeightsError  # noqa: E402
from vlm.hf_llava import HFLlavaError, export_run  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path, help="a finished run (config.yaml + model.safetensors)")
    parser.add_argument("out_dir", type=Path, help="the folder to write (replaced if it exists)")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"], help="dtype of the saved weights")
    parser.add_argument("--trust-remote-code", action="store_true",
                        help="let a backbone whose config asks for it run its model's own code (off: refused)")
    args = parser.parse_args(argv)
    try:
        out = export_run(args.run_dir, args.out_dir, getattr(torch, args.dtype), trust_remote_code=args.trust_remote_code)
    except (HFLlavaError, FileNotFoundError, UnsafeConfigError, WeightsError) as err:
        print(f"export_hf: {err}", file=sys.stderr)
        return 1
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
