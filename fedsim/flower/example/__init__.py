"""An ordinary Flower app (MLP on scikit-learn's digits) used by docs/flower.md, the notebook
analysis/flower_on_fedsim.ipynb, benchmarks/bench_flower.py and the tests."""
