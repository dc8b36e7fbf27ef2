package main

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
