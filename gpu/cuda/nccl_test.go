package cuda

import (
	"strings"
	"testing"
)

// A world of one (the emulator's NCCL over MPI singleton init): the sum is
// the input, in place and out of place. The multi-rank test is the
// training integration's, under mpirun.
func TestNCCLSingleRank(t *testing.T) {
	c := openDevice(t)
	if v, err := NCCLVersion(); err != nil || v < 20000 {
		t.Fatalf("NCCL version %d, %v", v, err)
	}
	id, err := GetUniqueID()
	must(t, err)
	if id == (UniqueID{}) {
		t.Fatal("unique id is all zeros")
	}
	comm, err := InitRank(1, id, 0)
	must(t, err)
	defer comm.Destroy()
	s, err := c.NewStream()
	must(t, err)
	defer s.Destroy()

	x := make([]float32, 777)
	for i := range x {
		x[i] = float32(i) * 0.5
	}
	send := upload(t, c, x)
	recv, err := c.Alloc(4 * len(x))
	must(t, err)
	defer c.Free(recv)
	must(t, comm.AllReduceSum(send, recv, len(x), s))
	must(t, comm.AllReduceSum(send, send, len(x), s)) // in place
	must(t, s.Sync())
	for _, p := range []Ptr{recv, send} {
		got := download(t, p, len(x))
		for i := range x {
			if got[i] != x[i] {
				t.Fatalf("sum[%d] = %v, want %v", i, got[i], x[i])
			}
		}
	}
	must(t, comm.AsyncError())
	must(t, comm.Destroy())
	must(t, comm.Destroy()) // a second Destroy does nothing
	if err := comm.AllReduceSum(send, recv, 1, s); err == nil {
		t.Error("AllReduceSum after Destroy succeeded")
	}
}

func TestNCCLErrors(t *testing.T) {
	openDevice(t)
	id, err := GetUniqueID()
	must(t, err)
	_, err = InitRank(1, id, 3)
	e, ok := err.(*Error)
	if !ok || e.Call != "ncclCommInitRank" || !strings.HasPrefix(err.Error(), "cuda: ncclCommInitRank: ") || strings.Contains(err.Error(), "\n") {
		t.Errorf("rank 3 of 1: got %v", err)
	}
	if _, err := InitRank(1, UniqueID{}, 0); err == nil {
		t.Error("a zero unique id was accepted")
	}

	comm, err := InitRank(1, id, 0)
	must(t, err)
	must(t, comm.Abort())
	must(t, comm.Destroy()) // after Abort: nothing to do
	if err := comm.AllReduceSum(0, 0, 1, nil); err == nil {
		t.Error("AllReduceSum after Abort succeeded")
	}
}
