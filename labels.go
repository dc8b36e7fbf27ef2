package main

// Recommended Kubernetes labels. The selector uses only name and instance,
// which never change for a Database; component and version may.
const (
	labelName      = "app.kubernetes.io/name"
	labelInstance  = "app.kubernetes.io/instance"
	labelComponent = "app.kubernetes.io/component"
	labelManagedBy = "app.kubernetes.io/managed-by"
	labelPodName   = "statefulset.kubernetes.io/pod-name"

	appName   = "postgresql"
	managedBy = "function-database"

	componentDatabase = "database"
	componentBackup   = "backup"
	componentRestore  = "restore"
	componentConfig   = "config"
	componentNetwork  = "network"
)

// selectorLabels select the PostgreSQL instances of one Database.
func selectorLabels(db *database) map[string]string {
	return map[string]string{labelName: appName, labelInstance: db.Name}
}

// instanceLabels select the instance pods only. The backup and restore Jobs'
// pods carry name and instance too (and the StatefulSet's selector, fixed at
// creation, is just those two): without the component the read and headless
// Services would list a backup pod as an endpoint and the PodDisruptionBudget
// would count it (seen on the real node).
func instanceLabels(db *database) map[string]string {
	l := selectorLabels(db)
	l[labelComponent] = componentDatabase
	return l
}

// labels are the labels of every object composed for a Database.
func labels(db *database, component string) map[string]string {
	l := selectorLabels(db)
	l[labelComponent] = component
	l[labelManagedBy] = managedBy
	return l
}

// podLabels select the instance of one ordinal, by the label the
// StatefulSet controller puts on every pod.
func podLabels(db *database, ordinal int) map[string]string {
	l := selectorLabels(db)
	l[labelPodName] = podName(db, ordinal)
	return l
}
