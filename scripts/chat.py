"""Chat with a trained VLM about an image: `python scripts/chat.py RUN_DIR [--image PATH]`.

Reads one message per line from stdin and prints the model's answer to each
(one line per answer). `/image PATH` switches to another image, `/image` alone
drops the image (text-only questions); end of input (Ctrl-D) quits. Each
message is answered on its own (no history). Decoding is greedy unless
`--sample` is given (then `--temperature`, `--top-p`, `--top-k`, `--seed`);
`--stop` cuts answers at a string (repeatable). Example:

    printf 'What shape is the red object?\\n/image other.png\\nAnd here?\\n' | python scripts/chat.py runs/NAME --image a.png
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from PIL import Image  # noqa: E402

import vlm.inference  # noqa: E402
from core.safe_load import UnsafeConfigError  # noqa: E402
from core.weights import WeightsError  # noqa: E402
from data.image_decode import ImageDecodeError, decode_image  # noqa: E402


def open_image(path: str | None) -> Image.Image | None:
    """The image as training decodes images (data/image_decode.py: modes, transparency, EXIF orientation)."""
    if not path:
        return None
    try:
        return decode_image(path)
    except ImageDecodeError as err:
        raise ValueError(str(err)) from None


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir", help="a finished run directory (config.yaml + model.safetensors)")
    ap.add_argument("--image", help="the image to talk about (none: text only)")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--sample", action="store_true", help="sample instead of greedy decoding")
    ap.add_argument("--temperature", type=float)
    ap.add_argument("--top-p", type=float)
    ap.add_argument("--top-k", type=int)
    ap.add_argument("--seed", type=int, help="makes sampling reproducible")
    ap.add_argument("--stop", action="append", default=[], help="cut answers at this string (repeatable)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--trust-remote-code", action="store_true",
                    help="let a backbone whose config asks for it run its model's own code (off: refused)")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    try:
        model = vlm.inference.load(args.run_dir, device=args.device, trust_remote_code=args.trust_remote_code)
    except (FileNotFoundError, UnsafeConfigError, WeightsError) as err:
        raise SystemExit(f"chat: {err}") from None
    try:
        image = open_image(args.image)
    except ValueError as err:
        raise SystemExit(str(err)) from None
    sampling = dict(temperature=args.temperature, top_p=args.top_p, top_k=args.top_k, seed=args.seed) if args.sample else {}
    interactive = sys.stdin.isatty()
    while True:
        if interactive:
            print("> ", end="", flush=True)
        line = sys.stdin.readline()
        if not line:  # end of input
            break
        line = line.strip()
        if not line:
            continue
        if line == "/image" or line.startswith("/image "):
            path = line[len("/image"):].strip()
            try:
                image = open_image(path)
            except ValueError as err:  # keep the current image
                print(f"{err}; keeping the current image", file=sys.stderr, flush=True)
                continue
            if interactive:
                print(f"(image: {path or 'none'})")
            continue
        (answer,) = model.generate([image], [line], max_new_tokens=args.max_new_tokens, do_sample=args.sample,
                                   stop=args.stop or None, **sampling)
        print(answer, flush=True)


if __name__ == "__main__":
    main()
