"""Host-parasite coevolution of sorting networks (Hillis 1990) as an evogan problem.

Hosts are comparator lists, parasites are sets of binary input vectors. A host's loss against a
parasite is the share of the parasite's vectors it leaves unsorted, the parasite's loss the share the
host sorts: each population pushes the other towards the inputs still failed.

W. D. Hillis, "Co-evolving parasites improve simulated evolution as an optimization procedure",
Physica D 42 (1990) 228-234.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field, ValidationError, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from evogan.api import ComponentOptions, Problem, ProblemContext
from evogan.genetic import GenomeVariation
from evogan.lazy import lazy
from evogan_sortnet.known import BEST_KNOWN, layers_allowed
from evogan_sortnet.variation import HostOperators, ParasiteOperators

if TYPE_CHECKING:
    import torch
    from torch import nn

    from evogan.api import FitnessGame, Variation
    from evogan_sortnet import networks as wiring
else:  # imported on first use: `evogan validate` and `components` read the options without torch
    torch = lazy("torch", globals())
    nn = lazy("torch.nn", globals())
    wiring = lazy("evogan_sortnet.networks", globals())

# Exhaustive results kept per genome; past this the cache starts afresh (a run revisits few old hosts).
CACHE_LIMIT = 1 << 16
# Prefetched host-by-parasite counts kept (a 5x5 grid's generation needs under 1,000); past this, afresh.
PAIR_LIMIT = 1 << 16
# Games of more pairs than this on average are left to each cell's own call. One pass over every cell's
# games saves kernel calls on small games (a host a cell, 5 x 5 pairs: 0.82-0.91x the grid's CPU per
# test) but its bookkeeping costs more than it saves on large ones (16 a cell, 20 x 20: 1.01-1.05x);
# 8 a cell (12 x 12) is a wash (0.94-1.07x). Measured side by side: RESULTS "The per-test target, side
# by side".
PREFETCH_PAIRS = 256


@dataclass
class Discoveries:
    """Correct networks this process has verified: when the first was found and each new smallest.

    :param history: ``(evaluations, effective comparators)`` at every new smallest, in order.
    """

    history: list[tuple[int, int]] = field(default_factory=list)
    smallest: list[list[int]] = field(default_factory=list)  # the smallest network's comparators
    depth: int = 0  # the smallest network's layers

    def record(self, evaluations: int, size: int, pruned: torch.Tensor, inputs: int) -> None:
        """A correct network of ``size`` effective comparators (``pruned``: those, as wire pairs, prefix
        included). Each new smallest gets a final check of its own: the whole pruned network on all
        ``2^inputs`` inputs, apart from the prefix-output path that found it (a failure is a bug here)."""
        if self.history and size >= self.history[-1][1]:
            return
        done, swaps = wiring.exhaustive(pruned.unsqueeze(0), inputs)
        if int(done[0]) != 1 << inputs or int(swaps.sum()) != size:
            raise RuntimeError(f"sortnet: a network recorded as correct with {size} comparators fails its final check")
        self.history.append((evaluations, size))
        self.smallest = pruned.tolist()
        self.depth = wiring.depth(self.smallest, inputs)

    def describe(self) -> dict[str, Any]:
        """The smallest correct network as the summary reports it (nothing before one is found): its
        comparators as ``[lower, upper]`` wire pairs in order, prefix included, ready to run."""
        if not self.history:
            return {}
        return {
            "smallest_correct": {
                "comparators": self.best,
                "depth": self.depth,
                "found_at_evaluations": self.best_at,
                "network": self.smallest,
            }
        }

    @property
    def first_at(self) -> int:
        return self.history[0][0] if self.history else 0

    @property
    def best(self) -> int:
        return self.history[-1][1] if self.history else 0

    @property
    def best_at(self) -> int:
        return self.history[-1][0] if self.history else 0


class SortingNetworks(Problem["SortingNetworks.Options"]):
    """Hosts (sorting networks) against parasites (binary test vectors), scored with bit operations."""

    name: ClassVar[str] = "sortnet"
    description: ClassVar[str] = (
        "host-parasite coevolution of sorting networks against binary test vectors (Hillis 1990)"
    )
    roles: ClassVar[tuple[str, str]] = ("host", "parasite")
    role_keys: ClassVar[tuple[str, str]] = ("host", "parasite")

    class Options(ComponentOptions):
        inputs: int = Field(16, ge=2, le=20, description="wires to sort (the exhaustive check runs all 2^inputs)")
        comparators: int = Field(
            60,
            ge=1,
            le=1024,
            description="genome length of a host: comparators evolved after the fixed prefix; a comparator "
            "(i, i) is a no-op, so effective sizes vary below it",
        )
        vectors: int = Field(20, ge=1, le=4096, description="binary test vectors per parasite (Hillis: 10 to 20)")
        prefix_layers: int = Field(
            0,
            ge=0,
            le=5,
            description="fixed hypercube layers before every host's comparators, on blocks of 2^layers wires "
            "(which must divide inputs): 4 for 16 inputs gives Green's first 32 comparators, as Hillis seeded "
            "his hosts; 2 for 12 inputs the first 12 of Shapiro and Green's 39. Hosts evolve only what follows, "
            "parasites' vectors pass the prefix once per call, and the exhaustive check runs over the prefix's "
            "distinct outputs only",
        )
        prefix: list[tuple[int, int]] = Field(
            default_factory=list,
            description="further fixed comparators (wire pairs) after the hypercube layers, e.g. the first "
            "layers of a known network",
        )
        symmetric: bool = Field(
            False,
            description="symmetric hosts: every evolved comparator (i, j) is followed by its reflection "
            "(inputs-1-j, inputs-1-i), so a genome of `comparators` pairs makes a network of up to twice as "
            "many (Valsalam and Miikkulainen 2013: the best known networks for 12 and 16 inputs are "
            "symmetric, and the search space shrinks to its square root)",
        )
        secondary: Literal["none", "size", "size_depth"] = Field(
            "none",
            description="a host's loss grows by less than one test vector's worth with its size: hosts "
            "that sort equally many of their tests rank the correct (checked on every input) and smaller "
            "one first (size: effective comparators; size_depth: then fewer layers). A host that sorts all "
            "its tests is checked on every input for this, as verify does; none: share sorted alone",
        )
        parasite_fitness: Literal["vectors", "hosts"] = Field(
            "vectors",
            description="a parasite's loss against a host: the share of its vectors the host sorts (vectors), "
            "or whether the host sorts them all, then that share as a tie-break (hosts: parasites are ranked "
            "by how many hosts fail them, as Hillis scored his)",
        )
        verify: bool = Field(
            True,
            description="check every host that sorts all of its parasites' vectors against all 2^inputs "
            "inputs, so the first correct network is noticed when it is first tested (not counted as "
            "evaluations)",
        )
        host: HostOperators = Field(default_factory=HostOperators, description="the hosts' crossover and mutation")
        parasite: ParasiteOperators = Field(
            default_factory=ParasiteOperators, description="the parasites' crossover and mutation"
        )

        @model_validator(mode="after")
        def _prefix_fits(self) -> SortingNetworks.Options:
            allowed = layers_allowed(self.inputs)
            if self.prefix_layers > allowed:
                why = f"{self.inputs} inputs admit {allowed}" + ("" if allowed else " (odd)")
                error = PydanticCustomError("prefix", f"{self.prefix_layers} hypercube layers asked, {why}")
                details = [InitErrorDetails(type=error, loc=("prefix_layers",), input=self.prefix_layers)]
                raise ValidationError.from_exception_data("SortingNetworks.Options", details)
            outside = [pair for pair in self.prefix if not all(0 <= wire < self.inputs for wire in pair)]
            if outside:
                wires = f"comparator {list(outside[0])} has a wire outside 0..{self.inputs - 1}"
                error = PydanticCustomError("prefix", wires)
                details = [InitErrorDetails(type=error, loc=("prefix",), input=self.prefix)]
                raise ValidationError.from_exception_data("SortingNetworks.Options", details)
            return self

    def __init__(self, options: SortingNetworks.Options, context: ProblemContext) -> None:
        super().__init__(options, context)
        self.evaluations = 0  # host-by-vector tests run by fitness in this process
        self.checks = 0  # hosts run against every input (not evaluations: measurement)
        self.found = Discoveries()
        self._exhaustive: dict[bytes, tuple[int, int, int]] = {}  # genome -> (sorted, size, depth)
        self._prefix = torch.empty(0, 2, dtype=torch.int64)  # normalised wire pairs
        self._prefix_used = torch.empty(0, dtype=torch.bool)  # which of them swap on some input
        self._reaching: wiring.InputSet | None = None  # the inputs that reach the evolved comparators
        self._variation: dict[str, GenomeVariation] = {}
        self._pairs: dict[tuple[bytes, bytes], int] = {}  # prefetched counts by (host, parasite) genome
        self.prefetched = 0  # fitness calls answered from the prefetched counts (measurement)

    # ------------------------------------------------------------------------------------------ setup
    def setup(self) -> None:
        options, device = self.options, self.context.device
        fixed = torch.tensor(options.prefix, dtype=torch.int64).reshape(-1, 2)
        prefix = torch.cat([wiring.hypercube_prefix(options.inputs, options.prefix_layers), fixed])
        self._prefix = wiring.normalise(prefix).to(device)
        self._reaching = wiring.prefix_outputs(options.inputs, self._prefix, device)
        if len(self._prefix):
            self._prefix_used = wiring.exhaustive(self._prefix.unsqueeze(0), options.inputs)[1][0]
        self._variation = {
            "host": GenomeVariation(options.host, low=0, up=options.inputs - 1, path="problem.host"),
            "parasite": GenomeVariation(options.parasite, low=0, up=1, path="problem.parasite"),
        }
        self._variation["host"].check(2 * options.comparators)
        self._variation["parasite"].check(options.vectors * options.inputs)

    def describe(self) -> dict[str, Any]:
        options = self.options
        evolved = options.comparators * (2 if options.symmetric else 1)
        return {
            "inputs": options.inputs,
            "prefix_comparators": len(self._prefix),
            "evolved_comparators": evolved,
            "max_comparators": len(self._prefix) + evolved,
            "symmetric": options.symmetric,
            "inputs_reaching_evolved": self._reaching.vectors if self._reaching else 1 << options.inputs,
            "vectors_per_parasite": options.vectors,
            "best_known_comparators": BEST_KNOWN.get(options.inputs),
            "host_operators": f"{options.host.crossover.operator}, {options.host.mutation.operator}",
            "parasite_operators": f"{options.parasite.crossover.operator}, {options.parasite.mutation.operator}",
            **self.found.describe(),
        }

    # ------------------------------------------------------------------------------------------ genomes
    def create(self, role: str, *, generator: torch.Generator) -> nn.Module:
        options, device = self.options, self.context.device
        if role == "host":
            wires = torch.randint(0, options.inputs, (options.comparators, 2), generator=generator)
            return wiring.Host(wires.to(device), self._prefix, mirror=options.inputs if options.symmetric else 0)
        if role == "parasite":
            bits = torch.randint(0, 2, (options.vectors, options.inputs), generator=generator)
            return wiring.Parasite(bits.to(device=device, dtype=torch.bool))
        raise ValueError(f"problem sortnet: no role {role!r} (roles: host, parasite)")

    @staticmethod
    def genome(role: str, network: nn.Module) -> list[int]:
        """The flat gene list DEAP's operators see: wire numbers of hosts, bits of parasites."""
        tensor = network.comparators if role == "host" else network.vectors
        assert isinstance(tensor, torch.Tensor)
        return tensor.flatten().long().tolist()  # a parasite's bools as 0 and 1

    @staticmethod
    def write(role: str, network: nn.Module, genome: Sequence[int]) -> None:
        """Put ``genome`` into ``network``'s buffer in place (same shape, dtype and device)."""
        tensor = network.comparators if role == "host" else network.vectors
        assert isinstance(tensor, torch.Tensor)
        tensor.copy_(torch.tensor(genome, dtype=torch.int64).reshape(tensor.shape))

    def vary(self, job: Variation) -> None:
        """Crossover with a mate from the role's pool, then mutation, written into each member's genome.
        The pool is only read: mates are copied into lists first."""
        for role in self.roles:
            members = job.members.get(role, [])
            if not members:
                continue
            genomes = [self.genome(role, member.network) for member in members]
            mates = [self.genome(role, mate.network) for mate in job.pool.get(role, ())]
            children = self._variation[role].vary(genomes, mates, job.rnd.numpy)
            for member, child in zip(members, children, strict=True):
                self.write(role, member.network, child)

    # ------------------------------------------------------------------------------------------ fitness
    def _networks(self, hosts: Sequence[nn.Module]) -> torch.Tensor:
        """The hosts' evolved comparators, normalised (the prefix runs apart: :func:`wiring.through`)."""
        evolved = torch.stack([host.comparators for host in hosts])  # type: ignore[misc]
        mirror = hosts[0].mirror if isinstance(hosts[0], wiring.Host) else 0  # symmetric? all hosts alike
        return wiring.normalise(wiring.with_mirrors(evolved, mirror) if mirror else evolved)

    @staticmethod
    def _key(network: nn.Module) -> bytes:
        """A genome's contents (a host's comparators or a parasite's vectors), as tables key them."""
        tensor = network.comparators if isinstance(network, wiring.Host) else network.vectors
        assert isinstance(tensor, torch.Tensor)
        return bytes(tensor.cpu().numpy())

    def prefetch_fitness(self, games: Sequence[FitnessGame]) -> None:
        """Every game's host-parasite counts not yet in the table, as one pass of one row per pair
        (:func:`~evogan_sortnet.networks.pair_counts`): many cells' neighbourhoods in one call. The
        :meth:`fitness` calls that follow read them instead of testing, and count tests and verify hosts
        exactly as they would have (nothing here touches ``evaluations`` or the discoveries). Games of
        more than ``PREFETCH_PAIRS`` pairs on average are left to the cells' own calls."""
        if sum(len(game.first) * len(game.second) for game in games) > PREFETCH_PAIRS * len(games):
            return
        hosts: dict[bytes, nn.Module] = {}
        parasites: dict[bytes, nn.Module] = {}
        pairs: dict[tuple[bytes, bytes], None] = {}
        for game in games:
            host_keys = [self._key(host) for host in game.first]
            parasite_keys = [self._key(parasite) for parasite in game.second]
            hosts.update(zip(host_keys, game.first, strict=True))
            parasites.update(zip(parasite_keys, game.second, strict=True))
            pairs.update(dict.fromkeys((h, p) for h in host_keys for p in parasite_keys))
        todo = [pair for pair in pairs if pair not in self._pairs]
        if not todo:
            return
        if len(self._pairs) + len(todo) > PAIR_LIMIT:  # afresh, but keeping what these games need
            self._pairs = {pair: self._pairs[pair] for pair in pairs if pair in self._pairs}
        host_row = {key: i for i, key in enumerate(dict.fromkeys(h for h, _ in todo))}
        parasite_row = {key: i for i, key in enumerate(dict.fromkeys(p for _, p in todo))}
        networks = self._networks([hosts[key] for key in host_row])
        vectors = torch.stack([parasites[key].vectors for key in parasite_row])  # type: ignore[misc]
        rows_h = torch.tensor([host_row[h] for h, _ in todo], device=networks.device)
        rows_p = torch.tensor([parasite_row[p] for _, p in todo], device=networks.device)
        counts = wiring.pair_counts(networks[rows_h], vectors[rows_p], self._prefix)
        self._pairs.update(zip(todo, counts.tolist(), strict=True))

    def _prefetched(self, hosts: Sequence[nn.Module], keys: Sequence[bytes]) -> torch.Tensor | None:
        """``(len(hosts), len(keys))`` counts from the prefetched table, or None if any pair is missing."""
        if not self._pairs:
            return None
        try:
            rows = [[self._pairs[(host, key)] for key in keys] for host in map(self._key, hosts)]
        except KeyError:
            return None
        self.prefetched += 1
        return torch.tensor(rows, dtype=torch.int64)

    def fitness(
        self,
        first: Sequence[nn.Module],
        second: Sequence[nn.Module],
        data: Any,
        *,
        generator: torch.Generator,
        score: Sequence[str] = roles,
        memo: dict[nn.Module, Any] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(host_loss[H, P], parasite_loss[P, H])``: the share of the parasite's vectors the host leaves
        unsorted, and the share it sorts. ``memo`` keeps, per host, its counts keyed by the parasites'
        genomes (content, never identity), so a generation's re-evaluations test only new pairs."""
        vectors = self.options.vectors
        parasites = torch.stack([p.vectors for p in second])  # type: ignore[misc]
        keys = [bytes(p.vectors.cpu().numpy()) for p in second]  # type: ignore[operator]
        rows: list[dict[bytes, int]] = [{} if memo is None else memo.setdefault(host, {}) for host in first]
        hosts_needed = [h for h, row in enumerate(rows) if any(key not in row for key in keys)]
        if hosts_needed:
            columns = sorted({p for h in hosts_needed for p, key in enumerate(keys) if key not in rows[h]})
            counts = self._prefetched([first[h] for h in hosts_needed], [keys[p] for p in columns])
            networks = None if counts is not None else self._networks([first[h] for h in hosts_needed])
            if networks is not None:
                counts = wiring.sorted_counts(networks, parasites[columns], self._prefix)
            assert counts is not None
            self.evaluations += len(hosts_needed) * len(columns) * vectors
            for i, h in enumerate(hosts_needed):
                rows[h].update(zip((keys[p] for p in columns), counts[i].tolist(), strict=True))
            if self.options.verify:
                self._verify_perfect([first[h] for h in hosts_needed], networks, counts, vectors)
        solved = torch.tensor([[row[key] for key in keys] for row in rows], dtype=torch.float32)
        share = solved.reshape(len(first), len(second)) / vectors
        host_loss = 1.0 - share
        if self.options.secondary != "none" and "host" in score:
            host_loss += self._parsimony(first, share).unsqueeze(1)
        if self.options.parasite_fitness == "hosts":
            passed = (share == 1.0).to(torch.float32)
            return host_loss, (passed + share / (len(first) + 1)).T.contiguous()
        return host_loss, share.T.contiguous()

    def _parsimony(self, hosts: Sequence[nn.Module], share: torch.Tensor) -> torch.Tensor:
        """Per host, less than one test vector's worth of loss (``1 / (vectors * parasites)``: the
        resolution of the average over a row) growing with its size, so hosts that sort equally many
        tests rank by it. A host that sorts all its tests is checked on every input (cached): if correct
        its measure is its effective size (then, with ``size_depth``, depth as a fraction), if not one more
        than any network can have; any other host's measure is its comparators that are not no-ops."""
        cap = len(self._prefix) + self.options.comparators + 1
        measures: list[float] = []
        perfect = (share == 1.0).all(dim=1).tolist()
        checked = iter(self._check([host for host, ok in zip(hosts, perfect, strict=True) if ok]))
        total = 1 << self.options.inputs
        pairs = torch.stack([host.comparators for host in hosts])  # type: ignore[misc]
        # comparators that are not no-ops, prefix included: one operation for all hosts, not one a host
        not_noops = ((pairs[..., 0] != pairs[..., 1]).sum(dim=1) + len(self._prefix)).tolist()
        for ok, not_noop in zip(perfect, not_noops, strict=True):
            if ok:
                inputs_sorted, size, layers = next(checked)
                measure = float(size) if inputs_sorted == total else float(cap)
                if self.options.secondary == "size_depth" and inputs_sorted == total:
                    measure += layers / (cap + 1)
            else:
                measure = float(not_noop)
            measures.append(measure)
        resolution = 1.0 / (self.options.vectors * share.shape[1])
        return torch.tensor(measures, dtype=torch.float32) / (cap + 1) * resolution

    def _verify_perfect(
        self, hosts: Sequence[nn.Module], networks: torch.Tensor | None, counts: torch.Tensor, vectors: int
    ) -> None:
        perfect = (counts == vectors).all(dim=1).nonzero().flatten().tolist()
        if perfect:
            self._check([hosts[i] for i in perfect], networks[perfect] if networks is not None else None)

    # ------------------------------------------------------------------------------------------ scores
    def _check(
        self, hosts: Sequence[nn.Module], networks: torch.Tensor | None = None
    ) -> list[tuple[int, int, int]]:
        """Each host's ``(inputs sorted, effective comparators, depth)`` over all ``2^inputs`` inputs (run as
        the prefix's distinct outputs through the evolved comparators), cached by genome; a correct one is
        recorded in :attr:`found` at the current evaluation count. Effective: the prefix's comparators that
        swap on some input and the evolved ones that swap on some input reaching them; the rest (no-ops,
        redundant) are removed from the count, the depth and the recorded network."""
        keys = [bytes(host.comparators.cpu().numpy()) for host in hosts]  # type: ignore[operator]
        todo = [i for i, key in enumerate(keys) if key not in self._exhaustive]
        if todo:
            if len(self._exhaustive) + len(todo) > CACHE_LIMIT:  # afresh, but keeping these hosts' results
                self._exhaustive = {key: self._exhaustive[key] for key in keys if key in self._exhaustive}
            stacked = networks[todo] if networks is not None else self._networks([hosts[i] for i in todo])
            sorted_inputs, swaps = wiring.exhaustive(stacked, self.options.inputs, over=self._reaching)
            self.checks += len(todo)
            total = 1 << self.options.inputs
            prefix = self._prefix[self._prefix_used] if len(self._prefix) else self._prefix
            for j, i in enumerate(todo):
                pruned = torch.cat([prefix, stacked[j][swaps[j]]])
                size = len(pruned)
                layers = wiring.depth(pruned.tolist(), self.options.inputs)
                self._exhaustive[keys[i]] = (int(sorted_inputs[j]), size, layers)
                if sorted_inputs[j] == total:
                    self.found.record(self.evaluations, size, pruned, self.options.inputs)
        return [self._exhaustive[key] for key in keys]

    def evaluate(
        self, networks: Sequence[nn.Module], weights: Sequence[float], *, generator: torch.Generator
    ) -> dict[str, float]:
        """The weighted ensemble of hosts on all ``2^inputs`` inputs (deterministic; ``generator`` unused).

        ``sorted``: weighted share of inputs sorted; ``correct``, ``comparators``, ``best_sorted``: of the
        best member with weight (most inputs sorted, then fewest effective comparators); ``evaluations``:
        host-by-vector tests run so far in this process; ``found``, ``first_correct_at``,
        ``smallest_correct``, ``smallest_correct_at`` and ``smallest_correct_depth``: of every correct network
        verified in this process (the ``_at`` keys in evaluations; 0 when none yet); ``depth``: the best
        member's layers once pruned."""
        results = self._check(networks)
        total = 1 << self.options.inputs
        members = [i for i, w in enumerate(weights) if w > 0] or list(range(len(networks)))
        best = max(members, key=lambda i: (results[i][0], -results[i][1], -results[i][2]))
        mass = sum(weights) or 1.0
        return {
            "sorted": sum(w * r[0] / total for w, r in zip(weights, results, strict=True)) / mass,
            "best_sorted": results[best][0] / total,
            "correct": float(results[best][0] == total),
            "comparators": float(results[best][1]),
            "depth": float(results[best][2]),
            "evaluations": float(self.evaluations),
            "found": float(bool(self.found.history)),
            "first_correct_at": float(self.found.first_at),
            "smallest_correct": float(self.found.best),
            "smallest_correct_at": float(self.found.best_at),
            "smallest_correct_depth": float(self.found.depth),
        }

    def objective(self, metrics: Mapping[str, float]) -> float:
        """What the mixture ES minimises: the weighted share of inputs left unsorted."""
        return 1.0 - metrics["sorted"]


__all__ = ["Discoveries", "SortingNetworks"]
