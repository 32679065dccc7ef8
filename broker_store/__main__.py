from broker_store.cli import main

raise SystemExit(main())
