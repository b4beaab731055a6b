"""Entry point: ``python -m vecgossip [+experiment=NAME] [overrides] [-m]``."""
from __future__ import annotations

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


if __name__ == "__main__":
    main()
