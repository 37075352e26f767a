module usher.invalid/pause

go 1.22
