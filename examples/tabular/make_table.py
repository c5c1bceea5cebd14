"""Write the example's CSV: a synthetic customer-churn table with a non-linear label.

    python examples/tabular/make_table.py data/churn.csv [--rows 20000] [--seed 7]

Columns: customer (an id, not a feature), tenure_months, monthly_spend, support_calls,
discount, contract_years, age, and the label churned (0/1). Churn rises with support calls and
short tenure, and sharply when a big spender gets no discount: a linear model cannot express
the interaction, a small MLP can. 5% of labels are flipped, so no model reaches 100%.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd


def make_table(rows: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    tenure = rng.gamma(2.0, 12.0, rows).round(1)
    spend = rng.lognormal(3.6, 0.5, rows).round(2)
    calls = rng.poisson(1.5, rows)
    discount = rng.choice([0.0, 0.05, 0.1, 0.2], rows)
    contract = rng.choice([0, 1, 2], rows, p=[0.5, 0.3, 0.2])
    age = rng.integers(18, 80, rows)
    score = (
        0.9 * (calls - 1.5)
        - 0.06 * (tenure - 24)
        + 3.0 * ((spend > 45) & (discount == 0.0))
        - 1.2 * contract
        + 0.8 * np.sin(age / 6.0)
    )
    churned = (score > 0).astype(int)
    flip = rng.random(rows) < 0.05
    churned[flip] = 1 - churned[flip]
    return pd.DataFrame(
        {
            "customer": [f"c{i:06d}" for i in range(rows)],
            "tenure_months": tenure,
            "monthly_spend": spend,
            "support_calls": calls,
            "discount": discount,
            "contract_years": contract,
            "age": age,
            "churned": churned,
        }
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, help="CSV file to write")
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    make_table(args.rows, args.seed).to_csv(args.out, index=False)
    print(f"wrote {args.rows} rows to {args.out}")


if __name__ == "__main__":
    main()
