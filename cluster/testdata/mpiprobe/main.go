// Command mpiprobe is the cluster tests' rank: it prints one line with its
// host name, the Open MPI rank variables and, with -n > 0, the outcome of an
// MPI_Allreduce of n float64 across the world (which crosses hosts).
//
//	mpiprobe [-n 0] [-env NAME]
//
// Line: "probe host=H rank=R size=S local=L localsize=LS env=V sum=ok|bad".
package main

import (
	"flag"
	"fmt"
	"os"

	gompi "github.com/sbromberger/gompi"
)

func main() {
	n := flag.Int("n", 0, "float64 values to allreduce (0: no MPI calls at all)")
	envName := flag.String("env", "", "print this variable's value as env=")
	flag.Parse()
	host, err := os.Hostname()
	if err != nil {
		fmt.Fprintln(os.Stderr, "mpiprobe:", err)
		os.Exit(1)
	}
	sum := "skipped"
	if *n > 0 {
		m, err := gompi.Start()
		if err != nil {
			fmt.Fprintln(os.Stderr, "mpiprobe: MPI_Init:", err)
			os.Exit(1)
		}
		w := m.NewCommunicator(nil)
		rank, size := w.Rank(), w.Size()
		in, out := make([]float64, *n), make([]float64, *n)
		for i := range in {
			in[i] = float64((rank + 1) * (i%7 + 1))
		}
		if err := w.Allreduce(out, in, gompi.OpSum); err != nil {
			fmt.Fprintln(os.Stderr, "mpiprobe: MPI_Allreduce:", err)
			os.Exit(1)
		}
		sum = "ok"
		for i, v := range out {
			if want := float64(size * (size + 1) / 2 * (i%7 + 1)); v != want {
				sum = fmt.Sprintf("bad[%d]=%v,want=%v", i, v, want)
				break
			}
		}
		w.Barrier()
		m.Stop()
	}
	env := "-"
	if *envName != "" {
		env = os.Getenv(*envName)
	}
	fmt.Printf("probe host=%s rank=%s size=%s local=%s localsize=%s env=%s sum=%s\n", host,
		os.Getenv("OMPI_COMM_WORLD_RANK"), os.Getenv("OMPI_COMM_WORLD_SIZE"),
		os.Getenv("OMPI_COMM_WORLD_LOCAL_RANK"), os.Getenv("OMPI_COMM_WORLD_LOCAL_SIZE"), env, sum)
}
