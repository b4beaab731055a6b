"""Entry point: ``python -m vecgossip [+experiment=NAME] [overrides] [-m]``."""
from __future__ import annotations

import sys

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> None:
    from .sim import run

    out = HydraConfig.get().runtime.output_dir
    summary = run(cfg, out)
    print(f"[vecgossip] {summary['name']}: first_reach={summary['first_reach_tick']} "
          f"most_reach={summary['most_reach_tick']} plateau_delay={summary['plateau_delay_tick']} "
          f"ticks={summary['ticks_run']} wall={summary['wall_seconds']:.1f}s -> {out}")


def flags_first(argv: list[str]) -> list[str]:
    """Hydra's argparse rejects overrides on both sides of -m (`+experiment=vc -m alpha=null,0.5`);
    moving the value-less -m/--multirun flag to the front makes that documented form work."""
    flags = [a for a in argv if a in ("-m", "--multirun")]
    return flags + [a for a in argv if a not in ("-m", "--multirun")]


if __name__ == "__main__":
    sys.argv[1:] = flags_first(sys.argv[1:])
    main()
