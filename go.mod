module github.com/zipccl/zipccl

go 1.26.0

require (
	github.com/NVIDIA/go-nvml v0.13.0-1
	github.com/klauspost/compress v1.20.3
	github.com/klauspost/cpuid/v2 v2.4.2
	github.com/stretchr/testify v1.12.1
	golang.org/x/exp v0.0.0-20261014143641-f0251eb4aa3e
	golang.org/x/sys v0.49.0
)

require (
	github.com/BurntSushi/toml v1.4.1-0.20240526193622-a339e1f7089c // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/exp/typeparams v0.0.0-20231108232855-2478ac86f678 // indirect
	golang.org/x/mod v0.42.0 // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/tools v0.52.0 // indirect
	honnef.co/go/tools v0.8.2 // indirect
)

tool honnef.co/go/tools/cmd/staticcheck
