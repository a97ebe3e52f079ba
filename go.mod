module github.com/neptune-cluster/neptune

go 1.26.8
