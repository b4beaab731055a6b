"""The rules between options (issue 36: one module): what one part's value means for another's.
Each rule is a small function over a validated :class:`~vecgossip.config.load.Run` (its typed
config, its algorithm, the composed config) that raises ``ValueError`` with one line; the
boundary (:mod:`vecgossip.config.load`) names the options as typed. A part's own ranges live on
its options model, not here."""
from __future__ import annotations

import importlib.util
from pathlib import Path

from omegaconf import OmegaConf

from vecgossip.config.knobs import consumed, interpolations, pass_through, shipped_readers
from vecgossip.core.errors import ConfigError
from vecgossip.data.registry import get_spec
from vecgossip.models import check_precision, get_model
from vecgossip.network.topology import doubly_stochastic, names
from vecgossip.runtime import memory
from vecgossip.runtime.device import pick_device

ROUND_DATA_TAIL = {"rounds": "its clients own fixed partitions (partition=...) and local test sets "
                             "(data.local_test_size)",
                   "tick": "its nodes sample with replacement (data.sampler) and are evaluated on data.eval_set"}


def check_run(run, overrides: list[str]) -> None:
    """Every rule about one simulation's config."""
    for rule in (model_data_rules, ignored_options, engine_only_options, algorithm_engine, buildable_topology, algorithm_requirements,
                 topology_for_engine, mixing_for_topology, tick_rules, partition_rules, precision, faults_nodes,
                 logger, adversary_rules, per_edge_state, privacy_rules, clock_rules):
        rule(run, overrides)


def cautions(run) -> list[str]:
    """What is allowed but known to go wrong, as one-line warnings logged at the start (never a
    refusal: a user may mean it): a round-engine SGD step lr / (1 - momentum) above the step the
    model was measured to train at (``ModelDef.stable_step``, results/lr_cpu/)."""
    cfg = run.cfg                               # one replica's run: its own scalar lr
    limit = get_model(cfg.model.name).stable_step   # registered models too (None: not measured)
    if cfg.engine.name != "rounds" or limit is None:
        return []
    lr, m = cfg.optim.lr, cfg.optim.momentum
    step = lr / (1 - m)
    if step <= limit * (1 + 1e-9):
        return []
    return [f"optim.lr={lr:g} with optim.momentum={m:g} is an SGD step lr / (1 - momentum) of {step:g}, above "
            f"the {limit:g} model={cfg.model.name} was measured to train at (results/lr_cpu/: such runs diverged on "
            f"most clients in round 1, counted as accuracy 0); optim.lr={limit * (1 - m):.3g} is within it"]


def check_plan(plan, world: int) -> None:
    """The rules about the whole plan: replicas, sharding, memory."""
    run = plan.first
    replicas_rules(plan, world)
    distributed(run, world)
    fits(plan, world)


# -- options the chosen parts would ignore -----------------------------------------------------
def given(overrides: list[str]) -> list[str]:
    """The keys the command line sets (``key=value``, ``+key=value``)."""
    return [o.split("=", 1)[0].lstrip("+~") for o in overrides if "=" in o and not o.startswith(("hydra", "+hydra"))]


def ignored_options(run, overrides: list[str]) -> None:
    """A knob or averaging option set on the command line that nothing in this config reads
    (``degree`` on a ring, ``beta`` for DFedAvg, ``local_steps`` for D-PSGD, ``rounds`` on the
    tick clock): refused rather than ignored."""
    read = consumed(run.raw)
    for key in given(overrides):
        if pass_through(key) and key not in read and not same_as_readers(run, key):
            raise ValueError(unread_message(run, key))


def same_as_readers(run, key: str) -> bool:
    """Does every option that would read ``key`` hold its value already (a preset fixing the same
    value: ``local_steps=1`` with D-PSGD changes nothing)?"""
    missing, refs = object(), interpolations(run.raw)
    value = OmegaConf.select(run.raw, key)
    fixed = [OmegaConf.select(run.raw, r, default=missing) for r, _ in shipped_readers().get(key, []) if r not in refs]
    fixed = [v for v in fixed if v is not missing]
    return bool(fixed) and all(v == value for v in fixed)


def unread_message(run, key: str) -> str:
    """Why ``key`` is not read here, in the words of the part that would have read it."""
    cfg, algo, method = run.cfg, run.algorithm, f"method={run.cfg.method_name}"
    readers = shipped_readers().get(key, [])
    if any(r.startswith("topology.k") for r, _ in readers) and not cfg.topology.entry.degree:
        return (f"{key} has no effect with topology={cfg.topology.name}: only topology="
                f"{', '.join(names(lambda t: t.degree and not t.user))} take a degree")
    if any(r.startswith("algorithm.") for r, _ in readers):
        takes = [f"algorithm.{k}" for k in run.raw.algorithm if k != "_target_"]
        return (f"{key} has no effect with algorithm {algo.name()} ({method}): "
                + (f"its hyperparameters are {', '.join(takes)}" if takes else "it takes no hyperparameters"))
    other = [f for _, f in readers if f.startswith("engine/") and f != f"engine/{cfg.engine.name}.yaml"]
    if other and all(f in other for _, f in readers):
        return f"{key} has no effect on the {cfg.engine.name} engine ({method}): only the {other[0][7:-5]} engine reads it"
    missing = object()
    fixed = [r for r, _ in readers if OmegaConf.select(run.raw, r, default=missing) is not missing
             and r not in interpolations(run.raw)]
    if fixed:
        return f"{key} has no effect with {method}: its preset sets {fixed[0]}={OmegaConf.select(run.raw, fixed[0])}"
    return f"{key} has no effect with {method} (the {cfg.engine.name} engine): nothing in this config reads it"


def engine_only_options(run, overrides: list[str]) -> None:
    """A data option the other engine reads (``data.sampler`` on the round engine, ...)."""
    engine = run.cfg.engine.name
    for key in given(overrides):
        group, _, name = key.partition(".")
        if group != "data" or name not in type(run.cfg.data).model_fields:
            continue
        only = (type(run.cfg.data).model_fields[name].json_schema_extra or {}).get("engine")
        if only is not None and only != engine:
            raise ValueError(f"{key} has no effect on the {'round' if engine == 'rounds' else engine} engine "
                             f"(method={run.cfg.method_name}): {ROUND_DATA_TAIL[engine]}")


# -- the algorithm ---------------------------------------------------------------------------
def algorithm_engine(run, overrides: list[str]) -> None:
    algo = run.algorithm
    if algo.engine != run.cfg.engine.name:
        raise ValueError(f"algorithm._target_={algo.name()} runs on the {algo.engine} engine, but the config "
                         f"selects engine={run.cfg.engine.name}: its method preset must select engine={algo.engine}")


def algorithm_requirements(run, overrides: list[str]) -> None:
    """The algorithm's :class:`~vecgossip.algorithms.Requires`, then its own ``check``."""
    algo, cfg = run.algorithm, run.cfg
    req, who = algo.requires, f"{algo.name()} (method={cfg.method_name})"
    why = f": {req.why}" if req.why else ""
    if req.local_steps is not None and (cfg.engine.local_steps != req.local_steps or cfg.engine.local_epochs is not None):
        raise ValueError(f"{who} takes engine.local_steps={req.local_steps} and engine.local_epochs=null{why}; "
                         f"got local_steps={cfg.engine.local_steps}, local_epochs={cfg.engine.local_epochs}")
    if req.gossip_steps is not None and cfg.engine.gossip_steps != req.gossip_steps:
        raise ValueError(f"{who} takes engine.gossip_steps={req.gossip_steps}{why}; got {cfg.engine.gossip_steps}")
    topo = cfg.topology.name
    if (req.topologies is not None and topo not in req.topologies) or topo in req.not_topologies:
        allowed = (f"topology={'|'.join(req.topologies)}" if req.topologies is not None
                   else f"any topology but {', '.join(req.not_topologies)}")
        raise ValueError(f"{who} takes {allowed}{why}; got topology={topo}")
    algo.check(cfg)


# -- the topology ----------------------------------------------------------------------------
def buildable_topology(run, overrides: list[str]) -> None:
    """The graph exists for n and k (a server algorithm builds none)."""
    if not run.algorithm.server:
        run.cfg.topology.check()


def topology_for_engine(run, overrides: list[str]) -> None:
    """The tick engine gossips along a fixed graph's links: no redrawn, directed or W-only topology."""
    cfg = run.cfg
    if cfg.engine.name != "tick":
        return
    topo = cfg.topology.entry
    if topo.per_round or topo.directed:
        what = "is directed" if topo.directed else "draws a new graph every round"
        raise ValueError(f"topology={cfg.topology.name} {what}: it needs a round-engine method "
                         f"(method=dpsgd|dfedavg|...); the tick engine takes "
                         f"{', '.join(names(lambda t: not (t.per_round or t.directed or t.weights is not None)))}")
    if topo.weights is not None:
        raise ValueError(f"topology={cfg.topology.name} is a mixing matrix W: the tick engine gossips along a "
                         "graph's links (register its graph: register_topology(name, graph))")


def mixing_for_topology(run, overrides: list[str]) -> None:
    """A doubly stochastic W exists only on undirected or balanced graphs (or a W registered so)."""
    cfg, algo = run.cfg, run.algorithm
    if cfg.engine.name != "rounds" or algo.server or algo.mixing != "doubly_stochastic":
        return
    topo = cfg.topology.entry
    if topo.weights is not None and not doubly_stochastic(topo.weights):
        raise ValueError(f"topology={cfg.topology.name}: its W is row- but not column-stochastic, and "
                         f"{algo.name()} needs a doubly stochastic W (the average is preserved only then)")
    if topo.directed and not topo.balanced:
        raise ValueError(f"topology={cfg.topology.name} is directed and unbalanced: no doubly stochastic W "
                         f"for {algo.name()} (method={cfg.method_name}); push-sum (method=sgp) runs on "
                         f"it, or a balanced one: {', '.join(names(lambda t: t.balanced))}")


# -- the tick engine -------------------------------------------------------------------------
def tick_rules(run, overrides: list[str]) -> None:
    cfg, algo = run.cfg, run.algorithm
    if cfg.engine.name != "tick":
        return
    if cfg.model.average_buffers is False:
        raise ValueError("model.average_buffers=false is a round-engine option; the tick engine averages "
                         "a model's BatchNorm statistics with it (allowed here: true)")
    if cfg.data.eval_set == "local" and algo.server:
        raise ValueError("data.eval_set=local evaluates every node on its own test images: a relay server "
                         f"(method={cfg.method_name}) reports the server's model alone")
    g = cfg.engine.guard_every
    if g != "auto" and int(g) > 1 and cfg.engine.on_divergence == "isolate":
        raise ValueError(f"engine.guard_every={g} with on_divergence=isolate: a diverged node would keep sending "
                         "until the guard's next read and the models in its receivers' buffers spread it past the "
                         "isolation; use engine.guard_every=auto (every tick under isolate) or on_divergence=stop")
    if cfg.engine.cuda_graphs == "on" and pick_device(cfg.device).type != "cuda":
        raise ValueError(f"engine.cuda_graphs=on needs device=cuda (got device={cfg.device}): a CPU runs no CUDA "
                         "graph; use engine.cuda_graphs=auto")


# -- the round engine's data -----------------------------------------------------------------
def partition_rules(run, overrides: list[str]) -> None:
    """Fixed partitions that exist for this data set and number of clients."""
    cfg = run.cfg
    if cfg.engine.name != "rounds" or get_spec(cfg.data.name).kind == "text":   # text: model_data_rules
        return
    d, m, spec = cfg.data, cfg.topology.n, get_spec(cfg.data.name)
    kind = d.partition_kind
    if d.alpha is not None and kind != "dirichlet":
        raise ValueError(f"data.alpha={d.alpha} has no effect with data.partition={kind}; "
                         "use partition=dirichlet or alpha=null")
    if m > spec.n_train:
        raise ValueError(f"topology.n={m} is more than the {spec.n_train} training samples of "
                         f"data={spec.name}: every client needs its own samples")
    if kind == "dirichlet":
        dirichlet_rules(d, m, spec)
    if kind == "pathological":
        c = d.classes_per_client
        if c is None or c > spec.num_classes:
            raise ValueError(f"data.classes_per_client must be an integer in [1, {spec.num_classes}] (the classes "
                             f"of data={spec.name}), got {c}")
        if m * c > spec.n_train:
            raise ValueError(f"topology.n x data.classes_per_client = {m * c} shards is more than the "
                             f"{spec.n_train} training samples of data={spec.name}")
    if d.local_test_size is not None and d.local_test_size > spec.n_test:
        raise ValueError(f"data.local_test_size must be <= {spec.n_test} (the test set), got {d.local_test_size}")
    if d.global_test_size is not None and d.global_test_size < spec.num_classes:
        raise ValueError(f"data.global_test_size must be an integer >= {spec.num_classes}, got {d.global_test_size}")


def dirichlet_rules(d, m: int, spec) -> None:
    if d.alpha is None:
        raise ValueError("data.partition=dirichlet needs data.alpha > 0, e.g. alpha=0.3; got null")
    least = d.min_samples or 1
    if m * least > spec.n_train:
        raise ValueError(f"topology.n={m} x data.min_samples={least} is more than the "
                         f"{spec.n_train} training samples of data={spec.name}")


# -- the model and the kind of data -----------------------------------------------------------
IMAGE_ONLY = ("alpha", "partition", "classes_per_client", "min_samples", "local_test_size", "local_eval_size",
              "sampler", "augment")


def model_data_rules(run, overrides: list[str]) -> None:
    """The model reads what the data set gives (images or character windows); text options only
    with text data, image options never with it; the roles a text run asks for exist."""
    cfg = run.cfg
    d, spec, model = cfg.data, get_spec(cfg.data.name), get_model(cfg.model.name)
    if model.inputs != spec.kind:
        fits = ", ".join(n for n in _models() if get_model(n).inputs == spec.kind)
        raise ValueError(f"model={cfg.model.name} reads {model.inputs} inputs, data={d.name} gives "
                         f"{'character windows' if spec.kind == 'text' else 'images'}: use model={fits}")
    if cfg.model.width is not None and model.width is None:
        raise ValueError(f"model.width={cfg.model.width} has no effect with model={cfg.model.name}: only "
                         f"{', '.join(n for n in _models() if get_model(n).width is not None)} take a width")
    keys = given(overrides)
    text_keys = [f"data.{k}" for k, f in type(d).model_fields.items() if (f.json_schema_extra or {}).get("data") == "text"]
    if spec.kind != "text":
        for key in keys:
            if key in text_keys:
                raise ValueError(f"{key} applies to text data only (data=shakespeare), not data={d.name}")
        return
    for key in keys:
        if key.removeprefix("data.") in IMAGE_ONLY and (key.startswith("data.") or key in ("alpha", "partition",
                                                                                         "classes_per_client")):
            raise ValueError(f"{key} does not apply to data={d.name}: its nodes are its speaking roles "
                             "(data.split=roles) or the same windows dealt at random (data.split=iid)")
    if d.partition is not None:
        raise ValueError(f"data.partition={d.partition} does not apply to data={d.name}: use data.split=roles|iid")
    if cfg.engine.name == "tick":
        if d.eval_set == "fixed100":
            raise ValueError(f"data.eval_set=fixed100 takes 10 test images per label, not defined for data={d.name}: "
                             "use local (each node on its own test windows) or full")
        if run.algorithm.server:
            raise ValueError(f"method={cfg.method_name} relays through a server node, which holds no role of "
                             f"data={d.name}: use a gossip method, or the round engine's fedavg")
    if d.text_file and not Path(d.text_file).expanduser().is_file():
        raise ValueError(f"data.text_file={d.text_file!r} is not a file (Gutenberg's complete works, pg100.txt)")
    from vecgossip.data.text import role_count
    count = role_count(d)
    if count == 0:
        raise ValueError(f"data.min_lines={d.min_lines} leaves no role of data={d.name} with enough text for a "
                         "test window: lower data.min_lines")
    if cfg.topology.n > count:
        raise ValueError(f"topology.n={cfg.topology.n} is more than the {count} roles of data={d.name} with at least "
                         f"data.min_lines={d.min_lines} speeches and a test window: use at most {count} "
                         "nodes/clients or a smaller data.min_lines")


def _models() -> list[str]:
    from vecgossip.models import MODELS
    return list(MODELS)


# -- run control -----------------------------------------------------------------------------
def precision(run, overrides: list[str]) -> None:
    cfg = run.cfg
    check_precision(cfg.model.name, cfg.model.impl, cfg.precision)


def faults_nodes(run, overrides: list[str]) -> None:
    nodes, n = run.cfg.faults.crash_nodes, run.cfg.topology.n
    if nodes and max(nodes) >= n:
        raise ValueError(f"faults.crash_nodes must be node indices in [0, {n}), got {list(nodes)}")


def adversary_rules(run, overrides: list[str]) -> None:
    """Byzantine clients exist among the round engine's clients; the attack is importable."""
    from vecgossip.adversaries.adversary import attack_class
    cfg, adv = run.cfg, run.cfg.adversary
    typed = [k for k in given(overrides) if k.startswith("adversary.") and k != "adversary.nodes"
             and not k.startswith("adversary.params.")]
    if not adv.active:
        if typed and "adversary.nodes" not in given(overrides):    # nodes=0 typed: a sweep's no-attack baseline
            raise ValueError(f"{typed[0]} has no effect without adversary.nodes (no client is Byzantine): "
                             "set adversary.nodes to a count, a fraction or a list of clients")
        if "adversary.attack" in typed:
            attack_class(adv.attack)                 # a misspelt attack stops the baseline too
        return
    if run.algorithm.server:
        raise ValueError(f"adversary.nodes: Byzantine nodes attack what nodes send each other; method="
                         f"{cfg.method_name} averages at a server")
    if cfg.engine.name == "tick":
        if run.algorithm.compression < 1:
            raise ValueError("adversary.nodes: the tick engine's Byzantine nodes forge whole models; weight-"
                             f"compressed sends (compression={run.algorithm.compression}) are not attacked so far")
        if cfg.faults.active:
            raise ValueError("adversary.nodes with faults.*: the tick engine does not combine them so far "
                             "(the round engine does)")
    n = cfg.topology.n if cfg.engine.name == "rounds" else cfg.topology.nodes
    count = len(adv.nodes) if isinstance(adv.nodes, list) else (adv.nodes if isinstance(adv.nodes, int)
                                                                 else round(adv.nodes * n))
    if isinstance(adv.nodes, list) and (max(adv.nodes) >= n or len(set(adv.nodes)) < len(adv.nodes)):
        raise ValueError(f"adversary.nodes must be distinct client indices in [0, {n}), got {adv.nodes}")
    if count >= n:
        raise ValueError(f"adversary.nodes: {count} Byzantine of {n} clients leaves no honest client")
    cls = attack_class(adv.attack)
    cls(adv, n, count)                               # its own options (adversary.params), checked
    reads = getattr(cls, "reads", ("epsilon", "sigma", "z"))   # a user's attack that does not say: all
    unread = [k for k in typed if k.split(".", 1)[1] in ("epsilon", "sigma", "z") and k.split(".", 1)[1] not in reads]
    if unread:
        value = OmegaConf.select(run.raw, unread[0])
        raise ValueError(f"{unread[0]}={value} has no effect with adversary.attack={adv.attack} (it reads: "
                         f"{', '.join(reads) or 'none of epsilon, sigma, z'})")


def clock_rules(run, overrides: list[str]) -> None:
    """Virtual seconds (engines/clock/): the round engine's gossip rounds are timed so far; the
    trace, bandwidth groups and latency matrix must fit the run (built here once, as the run will)."""
    from vecgossip.engines.clock.config import timer
    cfg, clock = run.cfg, run.cfg.clock
    typed = [k for k in given(overrides) if k.startswith("clock.") and k != "clock.enabled"]
    if not clock.enabled:
        if run.algorithm.requires.seconds:
            raise ValueError(f"method={cfg.method_name} runs in virtual seconds only ({run.algorithm.requires.why}): "
                             "set clock.enabled=true")
        if typed and "clock.enabled" not in given(overrides):    # enabled=false typed: a sweep's untimed baseline
            raise ValueError(f"{typed[0]} has no effect without clock.enabled=true (no round is timed)")
        return
    if cfg.engine.name == "tick":
        tick_clock_rules(run, overrides)
        if "clock.barrier" in given(overrides):
            raise ValueError(f"clock.barrier={clock.barrier} has no effect on the tick engine (method={cfg.method_name}): "
                             "its nodes never wait at a round's barrier")
    elif "clock.resolution" in given(overrides):
        raise ValueError(f"clock.resolution={clock.resolution} has no effect on the round engine "
                         f"(method={cfg.method_name}): its rounds are timed event by event")
    if run.algorithm.server and cfg.engine.name != "tick":
        if clock.barrier == "node":
            raise ValueError(f"clock.barrier=node with method={cfg.method_name}: a round through a server has one "
                             "barrier, the server's; use clock.barrier=global")
        from vecgossip.engines.clock.links import server_links
        server_links(clock.links)
    elif "clock.links.server" in given(overrides) or "clock.links.server_latency" in given(overrides):
        raise ValueError(f"clock.links.server* has no effect with method={cfg.method_name}: it has no server")
    if cfg.faults.active:
        raise ValueError("clock.enabled=true with faults.*: lost messages are not timed so far; offline clients "
                         "come from clock.churn")
    if clock.barrier == "node" and clock.churn.model != "none":
        raise ValueError(f"clock.barrier=node with clock.churn.model={clock.churn.model}: who a node hears from in "
                         "round t would depend on later rounds' transfers (they share the links), which the round "
                         "engine has not sent when it mixes round t; use clock.barrier=global, or a tick algorithm "
                         "in seconds")
    if clock.compute.model == "trace" and clock.compute.trace is None:
        raise ValueError("clock.compute.model=trace needs clock.compute.trace: a FedScale device-capacity file")
    if clock.churn.model == "trace" and clock.churn.trace is None:
        raise ValueError("clock.churn.model=trace needs clock.churn.trace: a FedScale client-behaviour file")
    try:
        tm = timer(clock, cfg.topology.n, cfg.data.batch_size, cfg.seed)
    except (ValueError, OSError, KeyError) as err:
        raise ValueError(f"clock: {err}") from None
    if cfg.engine.name == "tick" and tm.step_seconds.min() < clock.resolution:
        raise ValueError(f"clock.resolution={clock.resolution} is longer than the fastest node's step "
                         f"({tm.step_seconds.min():.4g} s): a tick holds at most one step of a node; "
                         "lower clock.resolution or raise clock.compute.seconds")


def tick_clock_rules(run, overrides: list[str]) -> None:
    """The tick engine in seconds (engines/tick/timed/) runs any tick algorithm, a user's own
    included: its messages (``ctx.send_models``, ``ctx.send_parts``, paired averages) are
    timed; ``ctx.mix`` / ``ctx.gather`` are refused when called (they deliver at once). Refused here,
    where the semantics are undefined in seconds: a peer rule (it reads each node's accuracy at
    fixed ticks), the relay server of a star (its rounds are the tick engine's), privacy and
    adversaries (their draws are per tick)."""
    cfg, algo = run.cfg, run.algorithm
    if algo.peer_rule:
        raise ValueError(f"clock.enabled=true: method={cfg.method_name} has a peer rule (engine.tl.*): it tests "
                         "every node at fixed ticks, which has no meaning in virtual seconds")
    if algo.server:
        raise ValueError(f"clock.enabled=true: method={cfg.method_name} relays through a server node: its rounds "
                         "are the tick engine's; use a round method with clock.enabled=true")
    if algo.requires.gather:
        raise ValueError(f"clock.enabled=true: method={cfg.method_name} calls ctx.gather ({algo.requires.why}), "
                         "which delivers every message at once: it cannot be timed; send timed messages instead")
    for key, on in (("privacy", cfg.privacy.active), ("adversary", cfg.adversary.active)):
        if on:
            raise ValueError(f"clock.enabled=true on the tick engine does not take {key}.* so far")


def privacy_rules(run, overrides: list[str]) -> None:
    """DP-SGD (privacy.*) replaces the default local SGD step of the round engine (the default
    Caffe SGD step of the tick engine): the algorithm must train with it (no SAM, no local work or
    training step of its own), the model must have per-sample gradients (no BatchNorm: its batch
    statistics mix the samples)."""
    from vecgossip.algorithms.base import RoundAlgorithm
    cfg, p = run.cfg, run.cfg.privacy
    set_here = [k for k in given(overrides) if k.startswith("privacy.") and k != "privacy.noise_multiplier"]
    if not p.active:
        if set_here:
            raise ValueError(f"{set_here[0]} is read only with privacy.noise_multiplier set (DP-SGD is off)")
        return
    algo = run.algorithm
    if cfg.engine.name == "tick":
        from vecgossip.algorithms.base import TickAlgorithm
        if type(algo).train is not TickAlgorithm.train:
            raise ValueError(f"privacy.noise_multiplier: method={cfg.method_name} trains with its own step "
                             "(train): DP-SGD replaces the default Caffe SGD step only")
        if p.sampling == "poisson":
            raise ValueError("privacy.sampling=poisson is the round engine's: the tick engine draws each batch with "
                             "replacement from its node's label mix (its bound is the conventional approximation, "
                             "said in summary.json); use privacy.sampling=shuffle here")
    elif type(algo).local_train is not RoundAlgorithm.local_train or getattr(algo, "sam", None):
        raise ValueError(f"privacy.noise_multiplier: method={cfg.method_name} does its own local work "
                         f"({'SAM steps' if getattr(algo, 'sam', None) else 'local_train'}): DP-SGD replaces the "
                         "default SGD step only")
    elif cfg.optim.sam:
        raise ValueError("privacy.noise_multiplier: optim.sam=true: DP-SGD with SAM steps is not supported")
    if cfg.layout.buffers:
        raise ValueError(f"privacy.noise_multiplier: model={cfg.model.name} has BatchNorm, whose batch statistics "
                         "mix the samples: per-sample gradients need GroupNorm (model.norm=group) or no norm")


def per_edge_state(run, overrides: list[str]) -> None:
    """Per-edge state lives on a topology's fixed links."""
    from vecgossip.algorithms import PerEdge
    cfg = run.cfg
    declared = [k for k, v in run.algorithm.state(cfg.layout).items() if isinstance(v, PerEdge)]
    if not declared:
        return
    why = ("has no graph (a server averages)" if run.algorithm.server else
           f"topology={cfg.topology.name} draws a new graph every round" if cfg.topology.entry.per_round else
           "the peer rule rewires the links" if getattr(run.algorithm, "peer_rule", False) else None)
    if why:
        raise ValueError(f"{run.algorithm.name()} keeps state per link ({', '.join(declared)}): it needs fixed "
                         f"links; {why}")


def logger(run, overrides: list[str]) -> None:
    if run.cfg.logger == "tensorboard" and importlib.util.find_spec("tensorboard") is None:
        raise ValueError("logger=tensorboard needs the tensorboard package: pip install -e '.[tensorboard]'")


def replicas_rules(plan, world: int) -> None:
    s = len(plan.runs)
    if s > 1 and world > 1:
        raise ConfigError(f"replicas={s} runs in one process: a sharded run (torchrun) takes replicas=1")


def distributed(run, world: int) -> None:
    """What a sharded run (runtime/shard.py) supports so far."""
    cfg = run.cfg
    if cfg.distributed.enabled is True and world == 1:
        raise ConfigError("distributed.enabled=true needs several processes: launch with "
                          "torchrun --nproc-per-node=G -m vecgossip ...")
    if world == 1:
        return
    if cfg.engine.name == "tick" and cfg.adversary.active:
        raise ConfigError("a sharded run (torchrun) of the tick engine does not take adversary.* so far: run it in "
                          "one process (the round engine shards adversaries)")
    if (cfg.engine.name == "tick" and cfg.model.broadcast_init) or cfg.faults.active:
        raise ConfigError("a sharded run (torchrun) does not take model.broadcast_init or faults.* so far: "
                          "run those in one process")
    if world > nodes(cfg):
        raise ConfigError(f"{world} processes for nodes={cfg.topology.n}: every process needs at least one node")
    if cfg.distributed.backend == "nccl" and pick_device(cfg.device).type != "cuda":
        raise ConfigError("distributed.backend=nccl needs device=cuda; CPU ranks use gloo")


def nodes(cfg) -> int:
    """The simulation's nodes: the tick engine's graph (a star adds its hub), the round engine's clients."""
    return cfg.topology.nodes if cfg.engine.name == "tick" else cfg.topology.n


def fits(plan, world: int) -> None:
    """Refuse, with the numbers, a run the device cannot hold (runtime/memory.py); sharded over
    GPUs, per GPU (ranks on one CPU host share its memory)."""
    run = plan.first
    dev = pick_device(run.cfg.device)
    need, how = memory.estimate(run, world if dev.type == "cuda" else 1, len(plan.runs))
    have = memory.available(dev)
    if have is not None and need > have:
        raise ConfigError(f"the run needs about {need / 2**30:.1f} GiB ({how}) but {have / 2**30:.1f} GiB is "
                          f"available on {dev}: use fewer nodes/clients, a smaller model or a larger device")

