#!/usr/bin/env bash
# A/B of the avx512 K-quant prefill (expanded-weight blocks vs CYB_KQUANT_REEXPAND=1), qwen15 shapes,
# interleaved rounds, 2 threads, tok/s of one matmul (best of 3x3 calls).
set -u
ab() { CYB_KQUANT_REEXPAND=$1 PYTHONPATH=${PYDIR:-python} python -c "
import sys, cyb_llm._core as c
enc, n, k, T, lvl = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
print(round(T / min(c.bench_matmul(enc, n, k, T, 3, lvl, 2, False) for _ in range(3))))" $2 $3 $4 $5 ${LEVEL:-avx512}; }
for round in 1 2 3; do
  for cfg in "q4_k 8960 1536 128" "q6_k 1536 8960 128" "q4_k 8960 1536 512" "q6_k 1536 8960 512"; do
    echo "$round $cfg  new $(ab 0 $cfg)  old $(ab 1 $cfg)"
  done
done
