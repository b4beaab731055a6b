"""``plugins=[golden_plugin]`` (with tests/golden on PYTHONPATH): registers the synthetic data set
``golden`` in a CLI or torchrun process, as a user's plug-in module registers its own."""
import cases

cases.register()
