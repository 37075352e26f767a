module usher.invalid/dra-proxy

go 1.22
