// Package tomlfile reads the TOML files hpctrain is given (model
// descriptions, training configurations, job specs) within limits the
// decoder does not have: a regular file (a FIFO would block the reader),
// of at most MaxBytes, whose tables and arrays nest at most MaxDepth deep.
// The TOML decoder's memory grows much faster than its input on deeply
// nested text (a 540 KB description took 24 GB), so these are checked
// before it sees a byte.
package tomlfile
