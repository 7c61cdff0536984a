"""Detection-quality evaluation: labelled cases built from public data, our scan and peer rules scored on them.

    .venv/bin/python -m bench.quality.run --data /work/shared/data --work /tmp/ca-quality

See bench/quality/README.md.
"""
