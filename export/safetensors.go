package export

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"

	"hpctrain/model"
)

// Safetensors writes net's parameters and buffers to w in the safetensors
// format (github.com/huggingface/safetensors):
//
//	8 bytes     N, little-endian uint64
//	N bytes     JSON header, padded with spaces to a multiple of 8:
//	            {"__metadata__": {...}, "conv1.weight": {"dtype": "F32",
//	             "shape": [32, 1, 3, 3], "data_offsets": [0, 1152]}, ...}
//	rest        the tensors' bytes, little-endian, back to back
//
// Tensors are named and laid out as PyTorch's state_dict of the equivalent
// nn.Module (see the package documentation); the metadata holds "format":
// "pt" (as safetensors.torch writes) and Info's fields. An error names the
// layer without a channels-first form.
func Safetensors(w io.Writer, net *model.Net, info Info) error {
	g, err := build(net, info.Step)
	if err != nil {
		return err
	}
	return writeSafetensors(w, g.tensors, metadata(net, info))
}

type stEntry struct {
	Dtype   string   `json:"dtype"`
	Shape   []int    `json:"shape"`
	Offsets [2]int64 `json:"data_offsets"`
}

func writeSafetensors(w io.Writer, ts []Tensor, meta map[string]string) error {
	meta["format"] = "pt"
	header := map[string]any{"__metadata__": meta}
	var off int64
	for _, t := range ts {
		e := stEntry{Dtype: "F32", Shape: t.Shape}
		n := int64(4 * len(t.F32))
		if t.I64 != nil {
			e.Dtype, n = "I64", int64(8*len(t.I64))
		}
		if _, dup := header[t.Name]; dup {
			panic("export: duplicate tensor name " + t.Name)
		}
		e.Offsets = [2]int64{off, off + n}
		header[t.Name] = e
		off += n
	}
	js, err := json.Marshal(header) // map keys sorted: the same network gives the same bytes
	if err != nil {
		return fmt.Errorf("safetensors header: %w", err)
	}
	for len(js)%8 != 0 {
		js = append(js, ' ')
	}
	bw := bufio.NewWriterSize(w, 1<<16)
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(len(js)))
	bw.Write(b[:])
	bw.Write(js)
	for _, t := range ts {
		for _, v := range t.F32 {
			binary.LittleEndian.PutUint32(b[:4], math.Float32bits(v))
			bw.Write(b[:4])
		}
		for _, v := range t.I64 {
			binary.LittleEndian.PutUint64(b[:], uint64(v))
			bw.Write(b[:])
		}
	}
	return bw.Flush() // bufio keeps the first write error
}
