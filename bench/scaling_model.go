package bench

import (
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strings"
)

// The analytic side of `hpctrain bench scaling`: the cost of an all-reduce
// of n bytes over p = nodes x ranksPerNode ranks, by the textbook formulas
// of Thakur, Rabenseifner and Gropp, "Optimization of collective
// communication operations in MPICH" (IJHPCA 19(1), 2005), with a hop
// between ranks of one node costing the intra-node (shared-memory) link's
// figures and a hop between nodes the network link's; and the training
// step that those all-reduces fit into, with the engine's gradient buckets
// overlapped with backward (train/buckets.go). docs/scaling.md states the
// formulas and their blind spots. With the node-shared all-reduce
// (-collective shm, training's default on the CPU) the node's ranks first
// sum through shared memory, a cost measured whole, and only then does the
// network carry each rank's share.

// Link is one kind of hop: a message of n bytes takes Alpha + n/bandwidth.
type Link struct {
	Name    string  `json:"name"`
	AlphaUS float64 `json:"alpha_us"` // latency per message (per algorithm step), microseconds
	Gbps    float64 `json:"gbit_s"`   // bandwidth, 10^9 bits per second
	Source  string  `json:"source"`   // "measured", "flag"
}

func (l Link) alpha() float64 { return l.AlphaUS * 1e-6 }

// bw is the bandwidth in bytes per second.
func (l Link) bw() float64 { return l.Gbps * 1e9 / 8 }

// msg is the time of one message of n bytes, in seconds.
func (l Link) msg(n float64) float64 { return l.alpha() + n/l.bw() }

// slowest is a hop no faster than either: the larger latency, the smaller
// bandwidth.
func slowest(a, b Link) Link {
	return Link{Name: a.Name + "|" + b.Name, AlphaUS: math.Max(a.AlphaUS, b.AlphaUS), Gbps: math.Min(a.Gbps, b.Gbps)}
}

// Topo is a job's layout: ranks are placed node by node (mpirun's default
// --map-by slot), so ranks r and r+1 share a node unless r+1 starts the
// next one.
type Topo struct {
	Nodes, PerNode int
	Intra, Inter   Link
	// Shared: the all-reduce is the node-shared one (mpi.Comm.NodeBuffer),
	// and Intra is not a hop but the node's whole sum of n bytes in
	// shared memory: Intra.msg(n), barriers, the sum and the copy back.
	Shared bool
}

// Ranks is the job's size.
func (t Topo) Ranks() int { return t.Nodes * t.PerNode }

// log2ceil is ceil(log2 q) for q >= 1.
func log2ceil(q int) int {
	if q <= 1 {
		return 0
	}
	return bits.Len(uint(q - 1))
}

// rdSteps is the number of exchanges of recursive doubling over q ranks
// (Thakur et al. 2005, section 4.4): lg q when q is a power of two; else
// the q - q' ranks above the largest power of two q' first hand their
// vector to a partner and get the result back at the end, two more steps
// of the whole vector: floor(lg q) + 2.
func rdSteps(q int) int {
	if q <= 1 {
		return 0
	}
	fl := bits.Len(uint(q)) - 1
	if q == 1<<fl {
		return fl
	}
	return fl + 2
}

// ringTime is the ring all-reduce (a reduce-scatter then an allgather,
// each p-1 steps of n/p bytes): 2(p-1)alpha + 2(p-1)/p n/bw. Every rank
// sends at once in every step, so a step takes as long as its slowest hop:
// intra-node when the job is one node, else the slower of the two links
// (with ranks placed node by node, each node has one outgoing inter-node
// hop of the ring, so the network link carries one message per step).
func ringTime(n float64, t Topo) float64 {
	p := t.Ranks()
	if p <= 1 {
		return 0
	}
	l := t.Intra
	if t.Nodes > 1 {
		l = t.Inter
		if t.PerNode > 1 {
			l = slowest(t.Intra, t.Inter)
		}
	}
	return 2 * float64(p-1) * l.msg(n/float64(p))
}

// rdTime is recursive doubling: lg p steps, each an exchange of the whole
// vector, lg p (alpha + n/bw). The first lg(ranksPerNode) steps pair ranks
// of one node; in each of the other steps all ranksPerNode ranks of a node
// exchange with another node at once, sharing its link.
func rdTime(n float64, t Topo) float64 {
	var s float64
	if t.PerNode > 1 {
		s += float64(rdSteps(t.PerNode)) * t.Intra.msg(n)
	}
	if t.Nodes > 1 {
		s += float64(rdSteps(t.Nodes)) * (t.Inter.alpha() + n*float64(t.PerNode)/t.Inter.bw())
	}
	return s
}

// treeTime is a binomial-tree reduce to rank 0 followed by a binomial-tree
// broadcast: 2 ceil(lg p) (alpha + n/bw). Only one rank per node takes
// part in the steps between nodes, so they do not share the link.
func treeTime(n float64, t Topo) float64 {
	var s float64
	if t.PerNode > 1 {
		s += 2 * float64(log2ceil(t.PerNode)) * t.Intra.msg(n)
	}
	if t.Nodes > 1 {
		s += 2 * float64(log2ceil(t.Nodes)) * t.Inter.msg(n)
	}
	return s
}

// sharedTime is the node-shared all-reduce (mpi/shm.go): the node's sum in
// shared memory, then, with more than one node, the R ranks of each node
// all-reduce their shares of n/R bytes at once, rank k with node rank k of
// every other node. The R all-reduces run side by side over the node's one
// link, so each step of any of the algorithms carries R messages of 1/R of
// what it carries for one all-reduce of n: together they cost what one
// all-reduce of n bytes over N ranks, one per node, costs. With one rank
// per node there is nothing to share and training falls back to
// MPI_Allreduce, as this does.
func sharedTime(n float64, t Topo) (string, float64) {
	node := t.Intra.msg(n)
	if t.Nodes == 1 {
		return "shm", node
	}
	alg, s := allreduceTime(n, Topo{Nodes: t.Nodes, PerNode: 1, Inter: t.Inter})
	return "shm+" + alg, node + s
}

// algorithms are the all-reduces the model chooses from.
var algorithms = []algorithm{{"ring", ringTime}, {"rd", rdTime}, {"tree", treeTime}}

// algorithm is an all-reduce of the model: its name and its cost.
type algorithm struct {
	name string
	time func(float64, Topo) float64
}

// allreduceTime is the time of an all-reduce of n bytes by the fastest of
// the algorithms, and its name ("" for a job of one rank: no all-reduce).
func allreduceTime(n float64, t Topo) (string, float64) {
	if t.Ranks() <= 1 {
		return "", 0
	}
	if t.Shared && t.PerNode > 1 {
		return sharedTime(n, t)
	}
	best, bt := "", math.Inf(1)
	for _, a := range algorithms {
		if s := a.time(n, t); s < bt {
			best, bt = a.name, s
		}
	}
	return best, bt
}

// Profile is one rank's compute step as measured: forward with the loss,
// backward, and the update, in milliseconds, and the gradient buckets in
// the order the engine all-reduces them, each with the time after the
// start of backward at which the engine started it (the end of backward
// for a bucket that starts in Wait).
type Profile struct {
	ForwardMS  float64        `json:"forward_ms"`
	BackwardMS float64        `json:"backward_ms"`
	UpdateMS   float64        `json:"update_ms"`
	OtherMS    float64        `json:"other_ms"` // the median step less the three phases
	Buckets    []BucketTiming `json:"buckets"`
}

// BucketTiming is one gradient bucket.
type BucketTiming struct {
	Bytes   int     `json:"bytes"`
	ReadyMS float64 `json:"ready_ms"` // after the start of backward
}

// StepMS is the compute-only step: what one rank alone takes.
func (p Profile) StepMS() float64 { return p.ForwardMS + p.BackwardMS + p.UpdateMS + p.OtherMS }

// GradBytes is the size of the gradients.
func (p Profile) GradBytes() int {
	n := 0
	for _, b := range p.Buckets {
		n += b.Bytes
	}
	return n
}

// scaled is p with every time multiplied by f.
func (p Profile) scaled(f float64) Profile {
	q := p
	q.ForwardMS *= f
	q.BackwardMS *= f
	q.UpdateMS *= f
	q.OtherMS *= f
	q.Buckets = make([]BucketTiming, len(p.Buckets))
	for i, b := range p.Buckets {
		q.Buckets[i] = BucketTiming{Bytes: b.Bytes, ReadyMS: b.ReadyMS * f}
	}
	return q
}

// Prediction is one configuration's predicted step.
type Prediction struct {
	Algorithm string  // the buckets' algorithms, "ring,rd" when they differ; "shm+ring": the node-shared sum, then a ring between nodes
	CommMS    float64 // all buckets' all-reduces, back to back
	ExposedMS float64 // the part after the end of backward
	StepMS    float64
}

// predict models the step of prof on topology t as the engine runs it:
// bucket k's all-reduce starts when backward has produced it and the
// previous bucket's all-reduce is done (one communication thread runs them
// in order); what is left after backward ends is exposed and adds to the
// step.
func predict(prof Profile, t Topo) Prediction {
	var pr Prediction
	end := 0.0 // ms after the start of backward when the last all-reduce ends
	var algs []string
	for _, b := range prof.Buckets {
		alg, sec := allreduceTime(float64(b.Bytes), t)
		ms := 1e3 * sec
		start := math.Max(b.ReadyMS, end)
		end = start + ms
		pr.CommMS += ms
		if alg != "" && !slices.Contains(algs, alg) {
			algs = append(algs, alg)
		}
	}
	// In the model's order.
	slices.SortFunc(algs, func(a, b string) int { return algIndex(a) - algIndex(b) })
	pr.Algorithm = strings.Join(algs, ",")
	if pr.Algorithm == "" {
		pr.Algorithm = "-"
	}
	pr.ExposedMS = math.Max(0, end-prof.BackwardMS)
	pr.StepMS = prof.StepMS() + pr.ExposedMS
	return pr
}

// algIndex is where an algorithm name's last part ("ring" of "shm+ring")
// stands in algorithms; -1 for "shm" alone. The buckets of one topology
// are all "shm+..." or none, so this orders them.
func algIndex(name string) int {
	base := name[strings.LastIndex(name, "+")+1:]
	return slices.IndexFunc(algorithms, func(a algorithm) bool { return a.name == base })
}

// fitLine fits t = a + b*x by least squares weighted by 1/t^2 (relative
// errors: the small sizes, which fix the latency, count as much as the
// large ones, which fix the bandwidth), with a >= 0.
func fitLine(x, t []float64) (a, b float64, err error) {
	if len(x) < 2 || len(x) != len(t) {
		return 0, 0, fmt.Errorf("fit: need two or more points")
	}
	var sw, sx, sy, sxx, sxy float64
	for i := range x {
		if t[i] <= 0 {
			return 0, 0, fmt.Errorf("fit: time %g at %g bytes", t[i], x[i])
		}
		w := 1 / (t[i] * t[i])
		sw += w
		sx += w * x[i]
		sy += w * t[i]
		sxx += w * x[i] * x[i]
		sxy += w * x[i] * t[i]
	}
	d := sw*sxx - sx*sx
	if d <= 0 {
		return 0, 0, fmt.Errorf("fit: the sizes do not differ")
	}
	b = (sw*sxy - sx*sy) / d
	a = (sy - b*sx) / sw
	if a < 0 {
		a, b = 0, sxy/sxx
	}
	if b <= 0 {
		return 0, 0, fmt.Errorf("fit: time does not grow with size (slope %g)", b)
	}
	return a, b, nil
}

// linkFromFit turns a fit t = a + b*bytes of all-reduces over p ranks, all
// of whose hops are of one kind, into that link: the latency from the
// small messages, which Open MPI reduces by recursive doubling (a = rd
// steps x alpha), the bandwidth from the large ones, which it reduces by a
// ring (b = 2(p-1)/p / bw). For p = 2 both algorithms give the same pair.
func linkFromFit(a, b float64, p int) Link {
	return Link{AlphaUS: 1e6 * a / float64(rdSteps(p)), Gbps: 8 * 2 * float64(p-1) / float64(p) / b / 1e9}
}

// sumFromFit turns a fit t = a + b*bytes of the node-shared all-reduce on
// one node into the node's sum: a latency a and a bandwidth 1/b, the
// whole sum of n bytes being a + n*b.
func sumFromFit(a, b float64) Link {
	return Link{AlphaUS: 1e6 * a, Gbps: 8 / b / 1e9}
}

// interFromSharedFit is the network link of a job of nodes nodes whose
// node-shared all-reduce fitted t = a + b*bytes, given the node's sum: what
// is left once the sum is taken away is an all-reduce over one rank per
// node (sharedTime), fitted as linkFromFit does.
func interFromSharedFit(a, b float64, sum Link, nodes int) (Link, error) {
	ra, rb := a-sum.alpha(), b-1/sum.bw()
	if ra <= 0 || rb <= 0 {
		return Link{}, fmt.Errorf("the node-shared all-reduce across %d nodes (%.1f us + %.3g us/MB) is no slower than the node's sum alone (%.1f us, %.2f Gbit/s): nothing left to fit the network from",
			nodes, 1e6*a, 1e6*b*(1<<20), sum.AlphaUS, sum.Gbps)
	}
	return linkFromFit(ra, rb, nodes), nil
}
