"""Train the small MLP whose weights chapter 13 quantizes (a real trained layer that ships with the book).

    python3 kernels_src/13-quantization/train_digits_mlp.py [path/to/digits.npz]

Data: the UCI "Optical Recognition of Handwritten Digits" set (1797 8 x 8 images, CC BY 4.0), as chapter 9
ships it (kernels_src/09-training/digits.npz, from scikit-learn's copy). Model: 64 -> 512 -> 512 -> 10 with
ReLU, trained in float32 NumPy (Adam, 40 epochs, batch 64, seed 0; a few seconds on a CPU). Writes
digits_mlp.npz beside this file: the weights (w1, b1, w2, b2, w3, b3; w* stored out x in, as nn.Linear does)
and the 360 held-out images and labels that the chapter evaluates on (none of them seen in training).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).parent


def main(src: Path) -> None:
    with np.load(src) as f:
        images, labels = f["images"], f["labels"]
    order = np.random.default_rng(0).permutation(len(labels))
    x = images.reshape(len(labels), 64)[order]
    y = labels.astype(np.int64)[order]
    x_test, y_test, x_train, y_train = x[:360], y[:360], x[360:] / 16.0, y[360:]
    rng = np.random.default_rng(0)
    sizes = [64, 512, 512, 10]
    params = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        params += [rng.standard_normal((fan_out, fan_in)) * np.sqrt(2 / fan_in), np.zeros(fan_out)]
    params = [p.astype(np.float32) for p in params]
    m = [np.zeros_like(p) for p in params]
    v = [np.zeros_like(p) for p in params]
    lr, b1, b2, t = 1e-3, 0.9, 0.999, 0
    for _ in range(40):
        perm = rng.permutation(len(y_train))
        for i in range(0, len(perm) - 63, 64):
            idx = perm[i:i + 64]
            acts = [x_train[idx].astype(np.float32)]
            for j in range(3):
                z = acts[-1] @ params[2 * j].T + params[2 * j + 1]
                acts.append(np.maximum(z, 0) if j < 2 else z)
            p = np.exp(acts[-1] - acts[-1].max(1, keepdims=True))
            p /= p.sum(1, keepdims=True)
            p[np.arange(len(idx)), y_train[idx]] -= 1
            dz = p / len(idx)
            grads = [None] * 6
            for j in (2, 1, 0):
                grads[2 * j], grads[2 * j + 1] = dz.T @ acts[j], dz.sum(0)
                if j:
                    dz = (dz @ params[2 * j]) * (acts[j] > 0)
            t += 1
            for k, g in enumerate(grads):
                m[k] = b1 * m[k] + (1 - b1) * g
                v[k] = b2 * v[k] + (1 - b2) * g * g
                params[k] -= lr * (m[k] / (1 - b1**t)) / (np.sqrt(v[k] / (1 - b2**t)) + 1e-8)
    h = x_test / 16.0
    for j in range(3):
        h = h @ params[2 * j].T + params[2 * j + 1]
        h = np.maximum(h, 0) if j < 2 else h
    print(f"test accuracy {np.mean(h.argmax(1) == y_test):.4f}")
    names = ["w1", "b1", "w2", "b2", "w3", "b3"]
    np.savez_compressed(HERE / "digits_mlp.npz", **dict(zip(names, params)),
                        x_test=x_test.astype(np.uint8), y_test=y_test.astype(np.uint8))


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE.parent / "09-training" / "digits.npz")
