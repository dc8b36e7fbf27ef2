//go:build generate

// Package input generates the input CRD and deepcopy functions with
// controller-gen, built from the pinned tools-gen module.
package input

//go:generate rm -rf ../package/input/
//go:generate go -C ../tools-gen build -o ../_output/bin/controller-gen sigs.k8s.io/controller-tools/cmd/controller-gen
//go:generate ../_output/bin/controller-gen paths=./v1beta1 object crd:crdVersions=v1 output:artifacts:config=../package/input
