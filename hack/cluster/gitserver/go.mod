module conflux.dev/testground/gitserver

go 1.26.0
