"""AD-PSGD (Lian, Zhang, Zhang, Liu, ICML 2018, Algorithm 1) on paper 1's tick clock: a node whose
training tick has come (every T_acq ticks)

    1. takes the gradient of its loss on a fresh minibatch at the model it read, g_i = grad F_i(x_i);
    2. averages its model with one neighbour j drawn uniformly: x_i, x_j <- (x_i + x_j) / 2;
    3. applies its gradient to its own (averaged) model with the configured optimiser
       (Caffe SGD: momentum, weight decay, the node's own lr schedule).

The averages of one tick are applied in node order (node i's pair before node i+1's; a pair that
shares a node with an earlier one waits for it), computed as a few conflict-free batches, each one
W x with W the pairwise-average matrix. Models are not buffered: no Eq. 1, no buffers, R unused.
Faults: each direction of an exchange is a message; a lost one leaves that side's model as it was
(W_ij moves to W_ii). A link's fate is drawn once per tick (faults.Fates): two exchanges of the
same pair within one tick both arrive or are both lost in that direction. In virtual seconds
(clock.enabled, engines/tick/timed/) an exchange is two messages, one each way: the average,
then the initiator's gradient, apply when both have arrived (ctx.pairwise_averages); churn cuts
an exchange in flight (no average; the initiator's gradient alone if it is online, else lost)."""
from __future__ import annotations

from vecgossip.algorithms.base import Requires, TickAlgorithm
from vecgossip.network.pairs import average_matrix, pair_batches  # noqa: F401  (where they lived: kept importable)


class ADPSGD(TickAlgorithm):
    requires = Requires(not_topologies=("star",), why="pairwise averages with a random neighbour: no relay server")

    def train(self, ctx, t, nodes):
        grads = ctx.gradients(nodes)                                  # (M', P), at the models they read
        a = ctx.a_full.tocsc()                                         # receiver-by-sender: column i = i's peers
        rng = ctx.random.numpy
        pairs = []
        for i in nodes:
            peers = a.indices[a.indptr[i]:a.indptr[i + 1]]
            if peers.size:
                pairs.append((int(i), int(peers[rng.integers(peers.size)])))
        return ctx.pairwise_averages(nodes, pairs, grads)

    def after_train(self, ctx, t, senders, online):
        """Nothing is sent or merged besides the pairwise averages of :meth:`train`."""
