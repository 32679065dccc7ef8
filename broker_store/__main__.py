from broker_store.cli.main import main

raise SystemExit(main())
