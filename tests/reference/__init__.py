"""The specification: every algorithm written out as a plain per-node loop (one ``nn.Module`` per
node, ``torch.optim.SGD`` or the update written by hand, Python loops over W_ij and over each
receiver's messages), with no vecgossip code in the algorithm's path. The tests run the batched
engine and its twin from the same initial models, minibatch draws and fault draws, and require
them to agree to float tolerance (float64: ~1e-10); a twin is what its algorithm means.

| algorithm | twin |
|---|---|
| gossip learning (Eq. 1), variance correction (Algorithm 3), faults | :mod:`reference.gossip` |
| D-PSGD, DFedAvg(M), DFedSAM(-MGS), FedAvg / FedSAM (paper 2) | :mod:`reference.dfl` |
| CHOCO-SGD | :mod:`reference.choco` |
| gradient tracking (DSGT) | :mod:`reference.gradient_tracking` |
| QG-DSGDm | :mod:`reference.qgm` |
| SGP (push-sum) | :mod:`reference.sgp` |
| Epidemic Learning (EL-Local, EL-Oracle) | :mod:`reference.epidemic` |
| AD-PSGD (tick engine) | :mod:`reference.adpsgd` |
| DFedProx (the worked plug-in example) | ``tests/test_example.py`` (beside the example) |

:mod:`reference.common` holds what the round-engine twins share: per-node modules made from the
engine's initial models, its sampler's draws replayed, W written out, W x as loops."""
