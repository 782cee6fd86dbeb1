package main

import (
	"fmt"
	"image"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestLazyImageReplacedByFIFO: images of a lazy folder replaced by named
// pipes once the ranks have listed it (rank 1 stops itself after loading
// the data; the files change; it goes on) are read as zeros by the loader
// workers, and every rank stops at the next checkpoint, one line naming a
// pipe. The open of a pipe blocked a worker for ever: each rank waited for
// its batch, outside any collective, so the watchdog only warned and the
// job hung, naming no file.
func TestLazyImageReplacedByFIFO(t *testing.T) {
	dir := t.TempDir()
	at := func(parts ...string) string { return filepath.Join(append([]string{dir}, parts...)...) }
	for _, tree := range []string{"train", "test"} {
		for k, cls := range []string{"ant", "bee"} {
			os.MkdirAll(at(tree, cls), 0o755)
			for i := 0; i < 16; i++ {
				im := image.NewGray(image.Rect(0, 0, 8, 8))
				for j := range im.Pix {
					im.Pix[j] = uint8(100*k + 3*i + j%7)
				}
				writePNG(t, at(tree, cls, fmt.Sprintf("%02d.png", i)), im)
			}
		}
	}
	j := startJob(t, 2, []string{"HPCTRAIN_FAULT=stop@1:resume"}, "train", "-dataset", "folder", "-data-dir", at("train"), "-test-dir", at("test"),
		"-image-shape", "8x8x1", "-lazy", "-data-workers", "2", "-prefetch", "4", "-model", "mlp", "-batch", "4", "-epochs", "2",
		"-threads", "1", "-progress", "0", "-checkpoint-dir", at("ck"), "-checkpoint-every", "2", "-collective-timeout", "30s")
	pid := waitStopped(t, j.out.String, func() int { return j.findRank(1) })
	pipes, _ := filepath.Glob(at("train", "bee", "*.png"))
	for _, p := range pipes {
		os.Remove(p)
		if err := syscall.Mkfifo(p, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	syscall.Kill(pid, syscall.SIGCONT)
	code, took := j.end(t, 90*time.Second)
	out := j.out.String()
	t.Logf("exit %d after %v:\n%s", code, took, out)
	if strings.Contains(out, "goroutine ") || strings.Contains(out, "collective timeout") {
		t.Fatalf("after %v: a panic trace or the collective timeout:\n%s", took, out)
	}
	stopped := 0
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "hpctrain: rank ") && strings.Contains(l, "reading images") {
			stopped++
			named := strings.Contains(l, at("train", "bee")) && strings.Contains(l, ": a named pipe (FIFO), not an image file")
			if !named && !strings.Contains(l, "failed on rank") {
				t.Errorf("the error line names no pipe, nor the rank that does: %s", l)
			}
		}
	}
	if code != 1 || stopped != 2 {
		t.Errorf("exit %d after %v with %d ranks saying they stop for the images, want 1 and 2:\n%s", code, took, stopped, out)
	}
}
