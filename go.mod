module hpctrain

go 1.27

require github.com/sbromberger/gompi v0.3.0

require (
	github.com/BurntSushi/toml v1.6.0 // indirect
	gonum.org/v1/gonum v0.17.0 // indirect
)
