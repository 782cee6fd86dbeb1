package cudanet

import "fmt"

// Precision is the arithmetic of a Net's matrix products.
type Precision int

const (
	FP32 Precision = iota // cublasSgemm
	TF32                  // cublasSgemm with TF32 tensor-op math
	BF16                  // bfloat16 operands, fp32 accumulation and output
	FP16                  // IEEE half operands, fp32 accumulation and output
)

var precisionNames = [...]string{FP32: "fp32", TF32: "tf32", BF16: "bf16", FP16: "fp16"}

// ParsePrecision reads a precision's name: fp32, tf32, bf16 or fp16.
func ParsePrecision(s string) (Precision, error) {
	for p, name := range precisionNames {
		if s == name {
			return Precision(p), nil
		}
	}
	return FP32, fmt.Errorf("unknown precision %q (precisions: fp32, tf32, bf16, fp16)", s)
}

func (p Precision) String() string {
	if p < 0 || int(p) >= len(precisionNames) {
		return fmt.Sprintf("Precision(%d)", int(p))
	}
	return precisionNames[p]
}
