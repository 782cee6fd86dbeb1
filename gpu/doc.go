// Package gpu finds a node's NVIDIA GPUs and places ranks on them: which
// GPU each local rank drives and which CPUs are nearest it. Computing on a
// GPU is not its job (that is a later compute backend's).
//
// The steps, in the order hpctrain runs them:
//
//	t := gpu.Discover("/")                         // NVML, else sysfs, else none
//	t, err := t.Visible(os.LookupEnv("CUDA_VISIBLE_DEVICES"))
//	spec, err := gpu.ParseSpec(cfg.GPUs, cfg.GPUShare)
//	a, err := t.Assign(localSize, spec)
//	req.Near = t.Near(a, cpuTopo)                 // affinity.Request: cores near each GPU
//	plan.Device = t.Label(a.GPUs[localRank])       // shown by -report-bindings
//
// Discovery asks NVML (github.com/NVIDIA/go-nvml, which loads
// libnvidia-ml.so.1 at run time, so the binary builds and runs where there
// is no driver) through the Prober interface; tests plug in go-nvml's mock
// DGX A100 or JSON fixtures. Without NVML it reads /sys/bus/pci/devices
// (PCIe paths, NUMA node, local_cpulist; no NVLink, names or UUIDs) and
// says so in Topology.Note. A node without a GPU is a normal result: an
// empty Topology whose Note says why, and callers then run the CPU path.
//
// # Invariants
//
//   - Topology.Devices are in CUDA's numbering: index i is what
//     cudaSetDevice(i) would open in this process. Device.Index keeps
//     NVML's number (the one nvidia-smi shows), which CUDA_VISIBLE_DEVICES
//     does not change.
//   - Topology.Links is square and symmetric, with Self on the diagonal
//     and nowhere else.
//   - Assign is a pure function of the topology and the request: every
//     local rank computes the same assignment, so the ranks agree without
//     talking, and no two ranks get one GPU unless Spec.Share allows it.
//
// Bad input (a CUDA_VISIBLE_DEVICES entry naming no GPU, more local ranks
// than GPUs without -gpu-share, a -gpus map naming a GPU twice) is
// returned as an error of one line that names the culprit.
//
// Non-goals: MIG instances as devices (MIG mode is reported, whole GPUs
// are placed), NICs in the matrix (nvidia-smi topo -m lists mlx5_*),
// CUDA_DEVICE_ORDER=FASTEST_FIRST on mixed-model nodes (indices are taken
// in PCI bus order, as CUDA_DEVICE_ORDER=PCI_BUS_ID and NVML number them).
package gpu
