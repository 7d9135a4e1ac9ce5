module github.com/quantumlearningmachines/handoff

go 1.26

require (
	github.com/fxamacker/cbor/v2 v2.10.0
	github.com/go-jose/go-jose/v4 v4.1.9
	github.com/go-json-experiment/json v1.27.2
	github.com/veraison/go-cose v1.3.0
)

require (
	github.com/rogpeppe/go-internal v1.16.0 // indirect
	github.com/x448/float16 v0.8.4 // indirect
)
